import Foundation
import HTTPTypes
import HeraldModel
import HeraldProto
import NotificationHubs
import Testing

@testable import Edge

@Suite("Notification Hubs formats")
struct NHFormatTests {
    @Test("every ScheduleTime / Apns-Expiry spelling the clients send is read, no zone meaning UTC")
    func scheduleTimes() throws {
        let expected = Date(timeIntervalSince1970: 1_704_096_000)  // 2024-01-01T08:00:00Z
        for text in [
            "2024-01-01T08:00:00",  // .NET "s", Java
            "2024-01-01T08:00:00.000Z",  // JS toISOString
            "2024-01-01T08:00:00+00:00",  // Python isoformat
            "2024-01-01T10:00:00+02:00", "2024-01-01T03:00:00-0500",
            "2024-01-01'T'08:00:00",  // the Python sample's literal quotes
            "\"2024-01-01T08:00:00\"", " 2024-01-01 08:00:00Z ",
            "2024-01-01T09:00+01:00",  // the W3C profile NH's docs show for Apns-Expiry: minutes, an offset
            "2024-01-01T08:00Z",
            "01/01/2024 08:00:00",  // .NET Expiry.ToString(CultureInfo.InvariantCulture)
            "1/1/2024 08:00:00",
        ] {
            let date = try #require(NHTime.parse(text), "\(text)")
            #expect(abs(date.timeIntervalSince(expected)) < 0.001, "\(text) → \(date)")
        }
        #expect(NHTime.parse("2024-01-01T08:00:00.250Z")!.timeIntervalSince(expected) == 0.25)
        for bad in [
            "", "tomorrow", "2024-13-01T08:00:00", "2024-02-30T08:00:00", "2024-01-01", "2024-01-01T08:00:00+25:00",
            "1704096000",
            "13/01/2024 08:00:00", "01/01/2024", "01/01/2024 25:00:00", "2024-01-01T08+01:00",
        ] {
            #expect(NHTime.parse(bad) == nil, "\(bad)")
        }
    }

    @Test("batch bodies in the .NET, JS and docs spellings; a missing part is NH's 400")
    func batch() throws {
        let notification = #"{"aps":{"alert":"hi"}}"#
        func body(_ boundary: String, devices: String, typeHeader: String = "Content-Type", newline: String = "\r\n")
            -> [UInt8]
        {
            Array(
                [
                    "preamble", "--\(boundary)", "\(typeHeader): application/json",
                    "Content-Disposition: inline; name=notification", "",
                    notification, "--\(boundary)", "Content-Type: application/json",
                    #"Content-Disposition: inline; name="devices""#, "",
                    devices, "--\(boundary)--", "epilogue",
                ].joined(separator: newline).utf8)
        }
        for (contentType, boundary) in [
            (#"multipart/mixed; boundary="nh-batch-multipart-boundary""#, "nh-batch-multipart-boundary"),  // .NET
            (#"multipart/mixed; boundary = "nh-boundary-5f1e""#, "nh-boundary-5f1e"),  // JS
            ("multipart/mixed; boundary = simple-boundary", "simple-boundary"),  // the REST docs
        ] {
            for devices in [#"["a1","b2"]"#, "['a1','b2']"] {
                for newline in ["\r\n", "\n"] {
                    let parts = try NHBatch.parse(
                        contentType: contentType,
                        body: body(boundary, devices: devices, typeHeader: "Content-type", newline: newline))
                    #expect(String(decoding: parts.notification, as: UTF8.self) == notification)
                    #expect(parts.notificationContentType == "application/json")
                    #expect(parts.devices == ["a1", "b2"])
                }
            }
        }
        #expect(throws: ServiceError.self) {
            try NHBatch.parse(contentType: "application/json", body: body("b", devices: "[]"))
        }
        let missing = #expect(throws: ServiceError.self) {
            try NHBatch.parse(
                contentType: "multipart/mixed; boundary=b",
                body: Array("--b\r\nContent-Disposition: inline; name=notification\r\n\r\n{}\r\n--b--".utf8))
        }
        #expect(missing?.message == "Could not find a part of the multipart content supplied")
        // NH's 400: invalid arguments answer 400 through the edge's one mapping.
        #expect(missing.map { EdgeError.from($0).status } == .badRequest)
        #expect(throws: ServiceError.self) {
            try NHBatch.parse(contentType: "multipart/mixed; boundary=b", body: body("b", devices: "not a list"))
        }
        // A boundary is at most 70 characters (RFC 2046); the search for one is linear in the body
        // (a 2,500-dash boundary over 120 KB of dashes once took 20 s).
        let dashes = Array(repeating: UInt8(ascii: "-"), count: 120_000)
        let long = #expect(throws: ServiceError.self) {
            try NHBatch.parse(
                contentType: "multipart/mixed; boundary=" + String(repeating: "-", count: 2500), body: dashes)
        }
        #expect(long?.message.contains("70 characters") == true)
        #expect(throws: ServiceError.self) {
            try NHBatch.parse(
                contentType: "multipart/mixed; boundary=" + String(repeating: "-", count: 70), body: dashes)
        }
        #expect(NHBatch.delimiterStarts(Array("--b\nx--b\n--b--".utf8), Array("--b".utf8)) == [0, 9])
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
        var headers: HTTPFields = [
            HTTPField.Name("ServiceBusNotification-Format")!: "windows", HTTPField.Name("X-WNS-Type")!: "wns/raw",
            HTTPField.Name("X-WNS-TTL")!: "60", .contentType: "application/octet-stream",
        ]
        let wns = try NotificationHubsRoutes.nhPayload(headers, body: Data("raw".utf8))
        #expect(
            wns.platform == .wns && wns.pushType == "wns/raw" && wns.ttlSeconds == 60
                && wns.contentType == "application/octet-stream")
        headers = [HTTPField.Name("ServiceBusNotification-Format")!: "Apple", HTTPField.Name("apns-priority")!: "7"]
        #expect(throws: EdgeError.self) { try NotificationHubsRoutes.nhPayload(headers, body: Data("{}".utf8)) }
        headers = [
            HTTPField.Name("ServiceBusNotification-Format")!: "apple",
            HTTPField.Name("ServiceBusNotification-Apns-Expiry")!: "2999-01-01T00:00:00Z",
        ]
        let apple = try NotificationHubsRoutes.nhPayload(headers, body: Data(#"{"aps":{"alert":"x"}}"#.utf8))
        #expect(apple.pushType == "alert" && apple.ttlSeconds > 0)
        // Numbers from outside are read once, bounded; nothing after them can trap.
        let format = HTTPField.Name("ServiceBusNotification-Format")!
        for value in [
            "-9223372036854775808", "9223372036854775807", "9223372036854775808", "253402300800", "-1", "1e9",
        ] {
            let expiration: HTTPFields = [format: "apple", HTTPField.Name("apns-expiration")!: value]
            #expect(throws: EdgeError.self, "\(value)") {
                try NotificationHubsRoutes.nhPayload(expiration, body: Data("{}".utf8))
            }
            let ttl: HTTPFields = [
                format: "windows", HTTPField.Name("X-WNS-Type")!: "wns/raw", HTTPField.Name("X-WNS-TTL")!: value,
            ]
            #expect(throws: EdgeError.self, "\(value)") {
                try NotificationHubsRoutes.nhPayload(ttl, body: Data("raw".utf8))
            }
        }
        // The latest expiry there is means the longest Herald keeps a push.
        for (name, value) in [
            ("apns-expiration", "253402300799"), ("ServiceBusNotification-Apns-Expiry", "9999-12-31T23:59:59Z"),
        ] {
            let far = try NotificationHubsRoutes.nhPayload(
                [format: "apple", HTTPField.Name(name)!: value], body: Data("{}".utf8))
            #expect(far.ttlSeconds == PushLimits.maxTTLSeconds, "\(name)")
        }
        headers = [
            HTTPField.Name("ServiceBusNotification-Format")!: "browser",
            HTTPField.Name("ServiceBusNotification-DeviceHandle")!: "https://e",
        ]
        #expect(throws: EdgeError.self) { try NotificationHubsRoutes.directHandle(headers, platform: .browser) }
        headers[HTTPField.Name("P256DH")!] = "p"
        headers[HTTPField.Name("Auth")!] = "a"
        #expect(
            try NotificationHubsRoutes.directHandle(headers, platform: .browser)
                == #"{"endpoint":"https://e","keys":{"auth":"a","p256dh":"p"}}"#)
    }
}
