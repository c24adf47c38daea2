import Foundation
import HeraldModel
public import HeraldProto

/// NH's send requests as Herald reads them: a native send's payload from NH's headers.
public enum NHSendPayload {
    /// The native payload of an NH send from its headers (`header` looks one up by name, any
    /// case) and body: `ServiceBusNotification-Format`, and the platform headers NH passes on as
    /// ``NHHeaders`` reads them (the same rules as an installation template's). A wrong value is
    /// `invalidArgument`, with what NH's callers need to fix it.
    public static func native(header: (String) -> String?, body: [UInt8], nowMillis: Int64) throws -> NativePayload {
        let format = header("ServiceBusNotification-Format") ?? ""
        var payload = NativePayload(body: body)
        switch NHPlatformNames.format(format) {
        case .apns:
            payload.platform = .apns
            if try !NHHeaders.applyAPNs(header, to: &payload, nowMillis: nowMillis),
                let expiry = header("ServiceBusNotification-Apns-Expiry")
            {
                guard let ttl = NHHeaders.ttl(w3cDate: expiry, nowMillis: nowMillis) else {
                    throw ServiceError.invalidArgument(
                        "ServiceBusNotification-Apns-Expiry is a W3C date, e.g. 2030-01-01T00:00:00Z")
                }
                payload.ttlSeconds = ttl
            }
        case .fcm:
            payload.platform = .fcm
            // NH takes FCM v1's {"message":{…}}; dispatch adds the token itself.
            guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
                let message = object["message"] as? [String: Any]
            else { throw ServiceError.invalidArgument(#"an fcmv1 body is FCM v1's {"message":{…}}"#) }
            payload.body = Array(
                try jsonData(message, options: [.withoutEscapingSlashes]))
        case .wns:
            payload.platform = .wns
            try NHHeaders.applyWNS(header, to: &payload)
            payload.contentType = header("Content-Type") ?? ""
        case .browser:
            payload.platform = .browser
        default:
            try refuseFormat(format)
        }
        return payload
    }

    /// Why a `ServiceBusNotification-Format` that names no platform Herald sends to is refused.
    private static func refuseFormat(_ format: String) throws -> Never {
        switch format.lowercased() {
        case "windowsphone":
            throw ServiceError.invalidArgument(
                "windowsphone (MPNS) is retired: Microsoft shut MPNS down; send windows (WNS) instead")
        case "gcm", "fcm":
            throw ServiceError.invalidArgument(
                "FCM's legacy API (\(format)) is retired: send fcmv1 with FCM v1's {\"message\":{…}}")
        case "":
            throw ServiceError.invalidArgument(
                "ServiceBusNotification-Format is required: apple, fcmv1, windows or browser")
        default:
            throw ServiceError.invalidArgument(
                "ServiceBusNotification-Format \(format) is not supported: use apple, fcmv1, windows or browser")
        }
    }
}

/// NH's XML answers about sends: `NotificationDetails` (telemetry) and a test send's
/// `NotificationOutcome`.
public enum NHTelemetry {
    public static let namespaces =
        #"xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance""#

    /// A send's state as NH names it (`NotificationOutcomeState`), in the telemetry XML and in
    /// Herald's own outcome JSON.
    public static func state(_ state: OutcomeState) -> String {
        switch state {
        case .enqueued: "Enqueued"
        case .processing: "Processing"
        case .completed: "Completed"
        case .abandoned: "Abandoned"
        case .noTargetFound: "NoTargetFound"
        case .scheduled: "Scheduled"
        // The .NET SDK's spelling (NH's docs say Canceled, which .NET reads as Unknown).
        case .cancelled: "Cancelled"
        case .unspecified, .unrecognized: "Unknown"
        }
    }

    /// NH's name for a platform, as in `TargetPlatforms` and `ApplicationPlatform`.
    public static func platformName(_ platform: Platform) -> String {
        NHPlatformNames.of(platform)?.format ?? "unknown"
    }

    /// The outcome-counts element of a platform, in the .NET SDK's order (Apns, Wns, FcmV1; Browser
    /// as the JS SDK names it, last).
    public static let countElements: [(Platform, String)] = [
        (.apns, "ApnsOutcomeCounts"), (.wns, "WnsOutcomeCounts"), (.fcm, "FcmV1OutcomeCounts"),
        (.browser, "BrowserOutcomeCounts"),
    ]

    /// NH's outcome name for a class of failure (docs/notification-hubs.md, "Telemetry"); herald-dispatch
    /// classifies the providers' reasons (``FailureClass/init(reason:)``).
    public static func outcomeName(_ failure: FailureClass) -> String {
        switch failure {
        case .abandoned: "AbandonedNotificationMessages"
        case .invalidCredentials: "InvalidCredentials"
        case .expiredChannel: "ExpiredChannel"
        case .wrongToken: "WrongToken"
        case .payloadTooLarge: "InvalidNotificationSize"
        case .throttled: "Throttled"
        case .providerError: "PnsServerError"
        default: "UnknownError"
        }
    }

    /// NH's times with milliseconds, exact (``iso8601(unixMillis:fractional:)``).
    public static func time(_ unixMs: Int64) -> String { iso8601(unixMillis: unixMs) }

    /// `GET /{hub}/messages/{id}`'s body.
    public static func details(_ outcome: Outcome, location: String, failures: String? = nil) -> String {
        var xml = "<NotificationDetails \(namespaces)>"
        xml += "<NotificationId>\(outcome.notificationID)</NotificationId>"
        xml += "<Location>\(xmlEscaped(location))</Location>"
        xml += "<State>\(state(outcome.state))</State>"
        xml += "<EnqueueTime>\(time(outcome.createdAtUnixMs))</EnqueueTime>"
        if outcome.startedAtUnixMs > 0 { xml += "<StartTime>\(time(outcome.startedAtUnixMs))</StartTime>" }
        if outcome.finishedAtUnixMs > 0 { xml += "<EndTime>\(time(outcome.finishedAtUnixMs))</EndTime>" }
        // The request body as it was sent (a template send's properties), as text.
        if !outcome.originalBody.isEmpty {
            xml +=
                "<NotificationBody>\(xmlEscaped(String(decoding: outcome.originalBody, as: UTF8.self), quotes: false))</NotificationBody>"
        }
        let platforms = Dictionary(outcome.platforms.map { ($0.platform, $0) }, uniquingKeysWith: { a, _ in a })
        let targets = countElements.compactMap { platforms[$0.0] == nil ? nil : platformName($0.0) }
        xml += "<TargetPlatforms>\(targets.joined(separator: ","))</TargetPlatforms>"
        for (platform, element) in countElements {
            // .NET reads PnsErrorDetailsUri between the Wns and the Fcm counts.
            if platform == .fcm, let failures {
                xml += "<PnsErrorDetailsUri>\(xmlEscaped(failures))</PnsErrorDetailsUri>"
            }
            guard let counts = platforms[platform] else { continue }
            var outcomes: [(String, Int64)] = []
            if counts.success > 0 { outcomes.append(("Success", counts.success)) }
            var failures: [String: Int64] = [:]
            for failure in counts.failures { failures[outcomeName(failure.failureClass), default: 0] += failure.count }
            outcomes += failures.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
            xml += "<\(element)>"
            for (name, count) in outcomes { xml += "<Outcome><Name>\(name)</Name><Count>\(count)</Count></Outcome>" }
            xml += "</\(element)>"
        }
        return xml + "</NotificationDetails>"
    }

    /// A test send's body: `<NotificationOutcome>` with one `RegistrationResult` per device.
    public static func testOutcome(_ deliveries: [DeliveryRecord]) -> String {
        let success = deliveries.filter { $0.state == .delivered }.count
        let failure = deliveries.filter { $0.state == .failed || $0.state == .abandoned }.count
        var xml = "<NotificationOutcome \(namespaces)><Success>\(success)</Success><Failure>\(failure)</Failure>"
        guard !deliveries.isEmpty else { return xml + #"<Results i:nil="true"/></NotificationOutcome>"# }
        xml += "<Results>"
        for delivery in deliveries {
            let outcome: String =
                switch delivery.state {
                case .delivered: "The Notification was successfully sent to the Push Notification System"
                case .failed where delivery.failureClass == .expiredChannel || delivery.failureClass == .wrongToken:
                    "The Push Notification System handle for the registration is invalid"
                case .failed, .abandoned: "The Push Notification System refused the notification: \(delivery.reason)"
                default: "The notification is still being delivered"
                }
            xml += "<RegistrationResult>"
            xml += "<ApplicationPlatform>\(platformName(delivery.platform))</ApplicationPlatform>"
            xml += "<PnsHandle>\(xmlEscaped(delivery.handle))</PnsHandle>"
            xml += "<RegistrationId>\(xmlEscaped(delivery.registrationID))</RegistrationId>"
            xml += "<Outcome>\(xmlEscaped(outcome))</Outcome>"
            xml += "</RegistrationResult>"
        }
        return xml + "</Results></NotificationOutcome>"
    }
}

/// NH's error body: `<Error><Code>401</Code><Detail>…TrackingId:…,TimeStamp:…</Detail></Error>`.
public enum NHErrorXML {
    public static func body(status: Int, message: String, trackingID: String, at time: Date = Date()) -> String {
        let stamp = time.formatted(Date.ISO8601FormatStyle())
        // Element text: quotes stay as they are (NH's "'Send' claim(s) are required").
        let detail = xmlEscaped("\(message).TrackingId:\(trackingID),TimeStamp:\(stamp)", quotes: false)
        return "<Error><Code>\(status)</Code><Detail>\(detail)</Detail></Error>"
    }
}
