import Foundation
import HeraldModel
import HeraldProto
import HeraldService
import HeraldTestSupport
import Testing

/// The rules every service applies to a request about one person, and the form of an export's
/// items (keys sorted, slashes as they are, times in UTC with milliseconds).
@Suite("export and erase requests", .watchedForStalls)
struct ExportJSONTests {
    @Test("one user of 1 to 256 bytes, at most one hub and a cursor of 256 bytes; a page of 1 to 1,000 (0: 100)")
    func bounds() throws {
        #expect(try ExportJSON.check(ExportUserRequest(user: "u")) == 100)
        #expect(try ExportJSON.check(ExportUserRequest(user: "u", limit: 1000)) == 1000)
        let long = String(repeating: "x", count: 257)
        for request in [
            ExportUserRequest(), ExportUserRequest(user: long), ExportUserRequest(user: "u", hub: long),
            ExportUserRequest(user: "u", after: long), ExportUserRequest(user: "u", limit: -1),
            ExportUserRequest(user: "u", limit: 1001),
        ] {
            let error = #expect(throws: ServiceError.self) { try ExportJSON.check(request) }
            #expect(error?.code == .invalidArgument)
        }
        #expect(throws: Never.self) { try ExportJSON.checkPerson(user: String(repeating: "é", count: 128), hub: "") }
        #expect(throws: ServiceError.self) {
            try ExportJSON.checkPerson(user: String(repeating: "é", count: 129), hub: "")
        }
    }

    // Moved from ConfigReaderTests.swift.
    @Test("times are ISO 8601 in UTC with milliseconds; none is empty")
    func times() {
        #expect(ExportJSON.time(1_795_898_003_123) == "2026-11-28T20:33:23.123Z")
        #expect(ExportJSON.time(1_795_898_003_000) == "2026-11-28T20:33:23.000Z")
        #expect(ExportJSON.time(0).isEmpty)
    }

    @Test("items: keys sorted, slashes left alone; a time before 1970 is none")
    func items() throws {
        struct Item: Encodable {
            var zeta = "https://x/y"
            var alpha = 1
        }
        #expect(String(decoding: try ExportJSON.encode(Item()), as: UTF8.self) == #"{"alpha":1,"zeta":"https://x/y"}"#)
        #expect(ExportJSON.time(-5).isEmpty)
    }
}
