import HeraldModel
import HeraldProto
import HeraldTestSupport
import NotificationHubs
import Testing

/// NH's platform headers as delivery options: the rules a direct send and a template share.
@Suite("NH platform headers", .watchedForStalls)
struct NHHeadersTests {
    static func headers(_ fields: [String: String]) -> NHHeaders.Lookup {
        let lowered = Dictionary(uniqueKeysWithValues: fields.map { ($0.key.lowercased(), $0.value) })
        return { lowered[$0] }
    }

    @Test(
        "APNs: push type inferred from the body when absent, priority 5 or 10 by either name, expiry as a bounded TTL")
    func apns() throws {
        var payload = NativePayload(platform: .apns, body: Array(#"{"aps":{"content-available":1}}"#.utf8))
        let expiration = try NHHeaders.applyAPNs(Self.headers([:]), to: &payload, nowMillis: 0)
        #expect(!expiration && payload.pushType == "background" && payload.priority == 0)
        for name in ["apns-priority", "X-Apns-Priority"] {
            var given = NativePayload(platform: .apns, body: Array("{}".utf8))
            try NHHeaders.applyAPNs(Self.headers([name: "5", "apns-collapse-id": "c"]), to: &given, nowMillis: 0)
            #expect(given.priority == 5 && given.collapseID == "c", "\(name)")
        }
        for priority in ["7", "0", "", "10.0", "99999999999"] {
            var refused = NativePayload(platform: .apns, body: Array("{}".utf8))
            #expect(throws: ServiceError.self, "\(priority)") {
                try NHHeaders.applyAPNs(Self.headers(["apns-priority": priority]), to: &refused, nowMillis: 0)
            }
        }
        var far = NativePayload(platform: .apns, body: Array("{}".utf8))
        #expect(try NHHeaders.applyAPNs(Self.headers(["apns-expiration": "253402300799"]), to: &far, nowMillis: 0))
        #expect(far.ttlSeconds == PushLimits.maxTTLSeconds)
        #expect(NHHeaders.ttl(w3cDate: "1970-01-01T00:01:40Z", nowMillis: 0) == 100)
        #expect(NHHeaders.ttl(w3cDate: "tomorrow", nowMillis: 0) == nil)
    }

    @Test("WNS: one of NH's four types, named or inferred; a TTL of 1 s to 28 days")
    func wns() throws {
        var payload = NativePayload(platform: .wns)
        try NHHeaders.applyWNS(Self.headers(["X-WNS-Type": "WNS/Raw", "X-WNS-TTL": "60"]), to: &payload)
        #expect(payload.pushType == "wns/raw" && payload.ttlSeconds == 60)
        #expect(throws: ServiceError.self) { try NHHeaders.applyWNS(Self.headers([:]), to: &payload) }
        #expect(throws: ServiceError.self) {
            try NHHeaders.applyWNS(Self.headers(["X-WNS-Type": "wns/foo"]), to: &payload, inferredType: { "wns/toast" })
        }
        try NHHeaders.applyWNS(Self.headers([:]), to: &payload, inferredType: { "wns/badge" })
        #expect(payload.pushType == "wns/badge")
        #expect(throws: ServiceError.self) {
            try NHHeaders.applyWNS(Self.headers(["X-WNS-Type": "wns/raw", "X-WNS-TTL": "0"]), to: &payload)
        }
    }
}
