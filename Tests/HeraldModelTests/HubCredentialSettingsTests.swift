import HeraldModel
import HeraldProto
import HeraldTestSupport
import Testing

/// A hub's credentials between the CLI's NAME=VALUE words, the typed request and dispatch's stored
/// settings.
@Suite("hub credential settings", .watchedForStalls)
struct HubCredentialSettingsTests {
    @Test("each platform's settings become its typed message and come back the same (empty ones left out)")
    func roundTrip() throws {
        let cases: [(Platform, [String: String])] = [
            (.apns, ["key": "PEM", "key-id": "K1", "team-id": "T1", "topic": "com.example", "environment": "sandbox"]),
            // A certificate: the file's bytes typed, base64 in the settings.
            (.apns, ["certificate": "MIIBAAECAwQ=", "certificate-password": "pw", "environment": "sandbox"]),
            (.fcm, ["service-account": "{}", "token-url": "http://127.0.0.1:1/token"]),
            (.wns, ["client-id": "c", "client-secret": "s"]),
            (.browser, ["vapid-key": "PEM", "subject": "mailto:ops@example.com"]),
        ]
        for (platform, settings) in cases {
            let request = try SetHubCredentialsRequest(hub: "h", platform: platform, settings: settings)
            // Carried typed: the message of its platform only.
            #expect(
                [request.apns != nil, request.fcm != nil, request.wns != nil, request.browser != nil].filter { $0 }
                    .count == 1)
            let back = try request.namedSettings()
            #expect(back.platform == platform && back.settings == settings)
            // And across the wire.
            let decoded = try SetHubCredentialsRequest(serializedBytes: try request.serializedBytes() as [UInt8])
            #expect(try decoded.namedSettings().settings == settings)
        }
        #expect(try SetHubCredentialsRequest(hub: "h", platform: .apns, settings: ["key-id": "K"]).apns?.keyID == "K")
        #expect(
            try SetHubCredentialsRequest(hub: "h", platform: .apns, settings: ["certificate": "MIIBAAECAwQ="]).apns?
                .certificate == [0x30, 0x82, 0x01, 0x00, 0x01, 0x02, 0x03, 0x04])
    }

    @Test("an unknown setting, an unknown platform, and none or two platforms' credentials are refused")
    func refusals() throws {
        #expect {
            try SetHubCredentialsRequest(hub: "h", platform: .apns, settings: ["key": "k", "team": "T"])
        } throws: { error in
            (error as? ServiceError)?.message
                == "unknown apns setting team: use key, key-id, team-id, topic, environment, url, certificate, certificate-password"
        }
        // A certificate is carried as base64 text in the settings: anything else is refused.
        #expect {
            try SetHubCredentialsRequest(hub: "h", platform: .apns, settings: ["certificate": "not base64!"])
        } throws: { error in
            (error as? ServiceError)?.message.contains("base64") == true
        }
        #expect(throws: ServiceError.self) {
            try SetHubCredentialsRequest(hub: "h", platform: .unspecified, settings: [:])
        }
        #expect {
            try SetHubCredentialsRequest(hub: "h").namedSettings()
        } throws: { error in
            (error as? ServiceError)?.message.contains("set exactly one platform's credentials") == true
        }
        var two = try SetHubCredentialsRequest(hub: "h", platform: .apns, settings: ["key": "k"])
        two.wns = WnsCredentials(clientID: "c")
        #expect(throws: ServiceError.self) { try two.namedSettings() }
    }
}
