import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import NotificationHubs
import Testing

/// NH's send formats, without the edge: a native send's payload from NH's headers, the telemetry
/// XML of a send, and NH's error body.
@Suite("Notification Hubs send formats", .watchedForStalls)
struct NHSendFormatTests {
    /// NHSendPayload over headers looked up as HTTP does, whatever their case.
    static func payload(_ headers: [String: String], body: Data, nowMillis: Int64 = unixMillis()) throws
        -> NativePayload
    {
        try NHSendPayload.native(
            header: { name in headers.first { $0.key.lowercased() == name.lowercased() }?.value },
            body: [UInt8](body), nowMillis: nowMillis)
    }

    @Test(
        "telemetry XML: states, outcome names summed per NH name, platforms in the .NET order, nothing before it is known"
    )
    func telemetry() {
        var apns = PlatformOutcome(platform: .apns, success: 3, failure: 3)
        apns.failures = [
            FailureCount(reason: "BadDeviceToken", count: 1, failureClass: .wrongToken),
            FailureCount(reason: "Unregistered", count: 1, failureClass: .expiredChannel),
            FailureCount(reason: "HTTP 410", count: 1, failureClass: .expiredChannel),
        ]
        let fcm = PlatformOutcome(platform: .fcm, success: 1)
        let outcome = Outcome(
            notificationID: "n-1", state: .completed, platforms: [fcm, apns], createdAtUnixMs: 1_704_096_000_000,
            startedAtUnixMs: 1_704_096_000_250, finishedAtUnixMs: 1_704_096_001_000)
        let xml = NHTelemetry.details(outcome, location: "http://h/hub/messages/n-1?api-version=2016-07&x=<")
        #expect(
            xml.contains(
                "<EnqueueTime>2024-01-01T08:00:00.000Z</EnqueueTime><StartTime>2024-01-01T08:00:00.250Z</StartTime>"))
        #expect(xml.contains("<TargetPlatforms>apple,fcmv1</TargetPlatforms>"))
        // Every millisecond as it is: through a Double and a format style, about half read one less.
        let wrong = (0..<1000).filter {
            !NHTelemetry.time(1_704_096_000_000 + Int64($0)).hasSuffix(".\(String(1000 + $0).dropFirst())Z")
        }
        #expect(wrong.isEmpty, "\(wrong.count) of 1,000 milliseconds misread, first \(wrong.prefix(3))")
        #expect(xml.contains("&amp;x=&lt;</Location>"))
        #expect(
            xml.contains(
                "<ApnsOutcomeCounts><Outcome><Name>Success</Name><Count>3</Count></Outcome><Outcome><Name>ExpiredChannel</Name><Count>2</Count></Outcome><Outcome><Name>WrongToken</Name><Count>1</Count></Outcome></ApnsOutcomeCounts><FcmV1OutcomeCounts>"
            ), "\(xml)")
        let enqueued = NHTelemetry.details(
            Outcome(notificationID: "n-2", state: .enqueued, createdAtUnixMs: 1), location: "l")
        #expect(
            enqueued.contains("<State>Enqueued</State>") && !enqueued.contains("StartTime")
                && !enqueued.contains("EndTime"))
        // The edge names dispatch's classes; it never reads a provider's reason.
        let names: [(FailureClass, String)] = [
            (.abandoned, "AbandonedNotificationMessages"), (.invalidCredentials, "InvalidCredentials"),
            (.expiredChannel, "ExpiredChannel"), (.wrongToken, "WrongToken"),
            (.payloadTooLarge, "InvalidNotificationSize"), (.throttled, "Throttled"),
            (.providerError, "PnsServerError"), (.unknown, "UnknownError"), (.unspecified, "UnknownError"),
        ]
        for (failure, name) in names { #expect(NHTelemetry.outcomeName(failure) == name) }
        #expect(Set(names.map(\.0)) == Set(FailureClass.knownValues))
    }

    @Test("NH's platform headers become the native payload's options; wrong values are 400")
    func platformHeaders() throws {
        var headers: [String: String] = [
            "ServiceBusNotification-Format": "windows", "X-WNS-Type": "wns/raw",
            "X-WNS-TTL": "60", "Content-Type": "application/octet-stream",
        ]
        let wns = try Self.payload(headers, body: Data("raw".utf8))
        #expect(
            wns.platform == .wns && wns.pushType == "wns/raw" && wns.ttlSeconds == 60
                && wns.contentType == "application/octet-stream")
        headers = ["ServiceBusNotification-Format": "Apple", "apns-priority": "7"]
        #expect(throws: ServiceError.self) { try Self.payload(headers, body: Data("{}".utf8)) }
        headers = [
            "ServiceBusNotification-Format": "apple",
            "ServiceBusNotification-Apns-Expiry": "2999-01-01T00:00:00Z",
        ]
        let apple = try Self.payload(headers, body: Data(#"{"aps":{"alert":"x"}}"#.utf8))
        #expect(apple.pushType == "alert" && apple.ttlSeconds > 0)
        // Numbers from outside are read once, bounded; nothing after them can trap.
        let format = "ServiceBusNotification-Format"
        for value in [
            "-9223372036854775808", "9223372036854775807", "9223372036854775808", "253402300800", "-1", "1e9",
        ] {
            let expiration: [String: String] = [format: "apple", "apns-expiration": value]
            #expect(throws: ServiceError.self, "\(value)") {
                try Self.payload(expiration, body: Data("{}".utf8))
            }
            let ttl: [String: String] = [
                format: "windows", "X-WNS-Type": "wns/raw", "X-WNS-TTL": value,
            ]
            #expect(throws: ServiceError.self, "\(value)") {
                try Self.payload(ttl, body: Data("raw".utf8))
            }
        }
        // The latest expiry there is means the longest Herald keeps a push.
        for (name, value) in [
            ("apns-expiration", "253402300799"), ("ServiceBusNotification-Apns-Expiry", "9999-12-31T23:59:59Z"),
        ] {
            let far = try Self.payload(
                [format: "apple", name: value], body: Data("{}".utf8))
            #expect(far.ttlSeconds == PushLimits.maxTTLSeconds, "\(name)")
        }
    }

    @Test("retired and unknown formats are refused with what to send instead; fcmv1 passes on FCM v1's message")
    func formats() throws {
        for (format, says) in [
            ("windowsphone", "MPNS"), ("gcm", "legacy API"), ("fcm", "legacy API"), ("", "is required"),
            ("baidu", "is not supported"),
        ] {
            do {
                _ = try Self.payload(["ServiceBusNotification-Format": format], body: Data("{}".utf8))
                Issue.record("\(format) was taken")
            } catch let error as ServiceError {
                #expect(error.code == .invalidArgument && error.message.contains(says), "\(format): \(error)")
            }
        }
        let fcm = ["ServiceBusNotification-Format": "fcmv1"]
        #expect(throws: ServiceError.self) { try Self.payload(fcm, body: Data(#"{"data":{}}"#.utf8)) }
        let message = try Self.payload(fcm, body: Data(#"{"message":{"data":{"k":"v"}}}"#.utf8))
        #expect(message.platform == .fcm && String(decoding: message.body, as: UTF8.self) == #"{"data":{"k":"v"}}"#)
    }

    @Test("NH's error body: code, detail with the tracking id and time, element text escaped but quotes kept")
    func errorXML() {
        let xml = NHErrorXML.body(
            status: 401, message: "'Send' claim(s) are required <here>", trackingID: "t-1",
            at: Date(timeIntervalSince1970: 1_704_096_000))
        #expect(
            xml
                == "<Error><Code>401</Code><Detail>'Send' claim(s) are required &lt;here&gt;.TrackingId:t-1,TimeStamp:2024-01-01T08:00:00Z</Detail></Error>"
        )
    }
}
