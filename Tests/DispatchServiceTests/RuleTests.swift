import DispatchService
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import Testing

@Suite("dispatch rules")
struct RuleTests {
    @Test("APNs background pushes get priority 5; oversized and inconsistent payloads are refused")
    func platformRules() throws {
        let background = try PlatformRules.prepare(NativePayload(platform: .apns, body: [1], pushType: "background"))
        #expect(background.options.priority == 5)
        let alert = try PlatformRules.prepare(NativePayload(platform: .apns, body: [1]))
        #expect(alert.options.pushType == "alert")
        #expect(alert.options.priority == 10)
        let raw = try PlatformRules.prepare(NativePayload(platform: .wns, body: [1], pushType: "wns/raw"))
        #expect(raw.options.contentType == "application/octet-stream")
        // Defaults are resolved once, here: a sender never falls back to its own.
        let web = try PlatformRules.prepare(NativePayload(platform: .browser, body: [1]))
        #expect(WebPushSender.headers(for: web.options) == [Header(name: "urgency", value: "high")])
        let timed = try PlatformRules.prepare(
            NativePayload(platform: .fcm, body: Array("{}".utf8), ttlSeconds: 60), sentAt: 1_000_500)
        #expect(timed.options.expiresAtUnixMs == 1_060_500)
        #expect(throws: ServiceError.self) {
            try PlatformRules.prepare(NativePayload(platform: .apns, body: [1], pushType: "background", priority: 10))
        }
        #expect(throws: ServiceError.self) {
            try PlatformRules.prepare(NativePayload(platform: .apns, body: Array(repeating: 0, count: 4097)))
        }
        #expect(throws: ServiceError.self) {
            try PlatformRules.prepare(NativePayload(platform: .wns, body: [1], pushType: "wns/x"))
        }
        #expect(throws: ServiceError.self) { try PlatformRules.prepare(NativePayload(body: [1])) }
    }
}
