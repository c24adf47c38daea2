import Foundation
import HeraldModel
import HeraldTestSupport
import NotificationHubs
import Testing

/// NH's time spellings and batch bodies, as NotificationHubs reads them.
@Suite("NH times and batch bodies", .watchedForStalls)
struct NHTimeAndBatchTests {
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
        // NH's 400: an invalid argument, which the edge's one mapping (EdgeError.from) answers 400.
        #expect(missing?.code == .invalidArgument)
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
        #expect(Multipart.delimiterStarts(Array("--b\nx--b\n--b--".utf8), Array("--b".utf8)) == [0, 9])
    }
}
