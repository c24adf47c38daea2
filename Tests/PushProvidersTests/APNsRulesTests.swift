import Crypto
import Foundation
import HeraldProto
import HeraldTestSupport
import ProviderDoubles
import PushProviders
import Testing

/// The rules both APNs doubles answer by (ProviderDoubles), against what Herald's APNs sender
/// sends: a double that refuses Herald's own requests, or lets a broken one through, would make
/// every delivery test downstream of it mean less.
@Suite("APNs' rules, as the doubles hold Herald's sender to them", .watchedForStalls)
struct APNsRulesTests {
    static let provider = (key: P256.Signing.PrivateKey(), keyID: "KEY1234567", teamID: "TEAM123456")
    static var rules: APNsRules.Provider {
        APNsRules.Provider(
            key: provider.key.publicKey, keyID: provider.keyID, teamID: provider.teamID, topic: "com.example.app")
    }
    static let device = String(repeating: "ab", count: 32)

    /// Herald's provider token, signed at `now` (Unix seconds).
    static func token(now: Int64, key: P256.Signing.PrivateKey = provider.key, keyID: String = provider.keyID)
        async throws -> String
    {
        try await APNsProviderToken(
            keyPEM: key.pemRepresentation, keyID: keyID, teamID: provider.teamID, now: { now }
        ).token()
    }

    /// Every rule, as a double checks a request with these parts.
    static func check(
        path: String, authorization: String?, headers: [String: String], body: [UInt8], now: Double
    ) -> APNsRules.Refusal? {
        let jwt: Substring
        switch (APNsRules.deviceToken(path: path), APNsRules.providerToken(authorization: authorization)) {
        case (.failure(let refusal), _), (_, .failure(let refusal)): return refusal
        case (.success, .success(let token)): jwt = token
        }
        switch APNsRules.verify(providerToken: String(jwt), key: rules.key) {
        case .failure(let refusal): return refusal
        case .success(let token):
            if let refusal = APNsRules.check(token, for: rules, now: now) { return refusal }
        }
        return APNsRules.checkHeaders(
            topic: headers["apns-topic"], pushType: headers["apns-push-type"], priority: headers["apns-priority"],
            apnsID: headers["apns-id"], for: rules) ?? APNsRules.checkPayload(body)
    }

    @Test("an alert and a background push as Herald's sender sends them pass every rule")
    func heraldsRequestsPass() async throws {
        let now: Int64 = 1_790_000_000
        let jwt = try await Self.token(now: now)
        for pushType in ["alert", "background"] {
            let body = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
            let payload = try PlatformRules.prepare(NativePayload(platform: .apns, body: body, pushType: pushType))
            var headers = ["apns-topic": "com.example.app", "apns-id": UUID().uuidString.lowercased()]
            for header in APNsSender.headers(for: payload.options) { headers[header.name] = header.value }
            let refusal = Self.check(
                path: "/3/device/\(Self.device)", authorization: "bearer \(jwt)", headers: headers, body: body,
                now: Double(now) + 60)
            #expect(refusal == nil, "\(pushType)")
        }
    }

    @Test("each broken rule gets APNs' status and reason, in APNs' order")
    func brokenRules() async throws {
        let now: Int64 = 1_790_000_000
        let jwt = try await Self.token(now: now)
        let good = [
            "apns-topic": "com.example.app", "apns-push-type": "alert", "apns-priority": "10",
            "apns-id": "123E4567-E89B-12D3-A456-426614174000",
        ]
        func refused(
            path: String = "/3/device/\(Self.device)", authorization: String? = nil, _ change: [String: String] = [:],
            body: [UInt8]? = nil, at: Int64 = now
        ) -> APNsRules.Refusal? {
            Self.check(
                path: path, authorization: authorization ?? "bearer \(jwt)",
                headers: good.merging(change) { $1 }, body: body ?? Array(#"{"aps":{}}"#.utf8), now: Double(at))
        }
        #expect(refused() == nil)
        #expect(refused(path: "/3/device/\(Self.device.dropLast())") == .init(400, "BadDeviceToken"))
        #expect(refused(path: "/3/device/\(Self.device.dropLast())g") == .init(400, "BadDeviceToken"))
        #expect(refused(path: "/3/devices/\(Self.device)") == .init(400, "BadDeviceToken"))
        // The device token is checked before the provider token.
        #expect(refused(path: "/3/device/x", authorization: "") == .init(400, "BadDeviceToken"))
        #expect(refused(authorization: "Bearer \(jwt)") == .init(403, "MissingProviderToken"))
        #expect(refused(authorization: "bearer x.y.z") == .init(403, "InvalidProviderToken"))
        let otherKey = try await Self.token(now: now, key: P256.Signing.PrivateKey())
        #expect(refused(authorization: "bearer \(otherKey)") == .init(403, "InvalidProviderToken"))
        let otherKeyID = try await Self.token(now: now, keyID: "KEY7654321")
        #expect(refused(authorization: "bearer \(otherKeyID)") == .init(403, "InvalidProviderToken"))
        #expect(refused(at: now + 3600) == .init(403, "ExpiredProviderToken"))
        #expect(refused(at: now + 3599) == nil)
        #expect(refused(["apns-topic": "com.example.other"]) == .init(400, "BadTopic"))
        #expect(refused(["apns-push-type": "voip"]) == .init(400, "InvalidPushType"))
        #expect(refused(["apns-priority": "1"]) == .init(400, "BadPriority"))
        #expect(refused(["apns-push-type": "background"]) == .init(400, "BadPriority"))
        #expect(refused(["apns-push-type": "background", "apns-priority": "5"]) == nil)
        #expect(refused(["apns-id": "123e4567e89b12d3a456426614174000"]) == .init(400, "BadMessageId"))
        #expect(refused(body: Array(repeating: UInt8(ascii: " "), count: 4097)) == .init(413, "PayloadTooLarge"))
        #expect(refused(body: Array(#"{"alert":"hi"}"#.utf8)) == .init(400, "PayloadEmpty"))
        #expect(refused(body: Array("not json".utf8)) == .init(400, "PayloadEmpty"))
        #expect(APNsRules.checkPayloadSize(4096) == nil)
    }

    /// A UUID's canonical text, as APNs wants `apns-id`: five groups of 8, 4, 4, 4 and 12 hex digits.
    /// (Not Foundation's `UUID(uuidString:)`: on Linux it reads a space or a dash in a digit's place,
    /// which this test found when the tests' double still used it.)
    static func isCanonicalUUID(_ text: String) -> Bool {
        let groups = text.split(separator: "-", omittingEmptySubsequences: false)
        return groups.map(\.count) == [8, 4, 4, 4, 12]
            && groups.allSatisfy { $0.allSatisfy { $0.isASCII && $0.isHexDigit } }
    }

    @Test("an apns-id is a UUID's canonical text, in either case")
    func messageIDs() {
        var rng = SystemRandomNumberGenerator()
        let alphabet = Array("0123456789abcdefABCDEF-gG ")
        var samples = [UUID().uuidString, UUID().uuidString.lowercased(), "", "-", String(repeating: "-", count: 36)]
        for _ in 0..<2000 {
            // Mostly well-formed ids with one character changed, some random strings.
            var id = Array(UUID().uuidString)
            id[Int.random(in: 0..<id.count, using: &rng)] = alphabet.randomElement(using: &rng) ?? "0"
            samples.append(String(id))
            let length = Int.random(in: 30...40, using: &rng)
            samples.append(String((0..<length).map { _ in alphabet.randomElement(using: &rng) ?? "0" }))
        }
        for sample in samples {
            let refusal = APNsRules.checkHeaders(
                topic: "t", pushType: "alert", priority: "10", apnsID: sample,
                for: APNsRules.Provider(key: Self.provider.key.publicKey, keyID: "k", teamID: "t", topic: "t"))
            #expect((refusal == nil) == Self.isCanonicalUUID(sample), "\(sample)")
        }
    }
}
