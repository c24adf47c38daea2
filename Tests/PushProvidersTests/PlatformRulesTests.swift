import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import PushProviders
import Testing

@Suite("provider rules: payloads and failure classes", .watchedForStalls)
struct PlatformRulesTests {
    @Test("Each provider's failure reasons are classified by dispatch, whatever their spelling")
    func failureClasses() {
        let expected: [(String, FailureClass)] = [
            ("Abandoned", .abandoned), ("NoCredentials", .invalidCredentials),
            ("InvalidProviderToken", .invalidCredentials), ("THIRD_PARTY_AUTH_ERROR", .invalidCredentials),
            ("HTTP 401", .invalidCredentials), ("Unregistered", .expiredChannel), ("UNREGISTERED", .expiredChannel),
            ("HTTP 410", .expiredChannel), ("BadDeviceToken", .wrongToken), ("SENDER_ID_MISMATCH", .wrongToken),
            ("PayloadTooLarge", .payloadTooLarge), ("HTTP 413", .payloadTooLarge), ("TooManyRequests", .throttled),
            ("QUOTA_EXCEEDED", .throttled), ("ServiceUnavailable", .providerError), ("HTTP 503", .providerError),
            ("UNAVAILABLE", .providerError), ("something new", .unknown), ("", .unknown), ("Erased", .unknown),
        ]
        for (reason, failure) in expected { #expect(FailureClass(reason: reason) == failure, "\(reason)") }
        #expect(FailureClass(state: .delivered, reason: "") == .unspecified)
        #expect(FailureClass(state: .pending, reason: "HTTP 503") == .unspecified)
        #expect(FailureClass(state: .abandoned, reason: "HTTP 503") == .abandoned)
        #expect(FailureClass(state: .failed, reason: "BadDeviceToken") == .wrongToken)
    }

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
        #expect(
            WebPushSender.headers(for: web.options) == [
                Header(name: "ttl", value: String(WebPushSender.defaultTTL)), Header(name: "urgency", value: "high"),
            ])
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
