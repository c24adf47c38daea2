import Foundation
import HeraldProto
import HeraldRPC
import HeraldTestSupport
import ProviderDoubles
import StackTestSupport
import Testing

/// APNs certificate-based auth per hub, on the whole stack: to nghttpd, which ends a
/// handshake without a client certificate, and to a double that (as APNs) takes only certificates
/// of its CA; a wrong or ended certificate says why and loses nothing; a hub switches between
/// token and certificate auth without a restart.
@Suite("APNs certificates per hub", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct APNsCertificateTests {
    static func certificates(_ fixture: ProviderFixture) async throws -> APNsTestCertificates {
        let folder = fixture.folder + "/apns-certificates"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return try await APNsTestCertificates.make(in: folder)
    }

    /// Installs device `installation` with an APNs token on `hub` and sends it an alert; the send's id.
    static func send(_ live: LiveStack, hub: String, _ full: String, installation: String, token: String) async throws
        -> String
    {
        let put = try await live.edge.request(
            "PUT", "/\(hub)/installations/\(installation)?api-version=2020-06",
            authorization: NHFixture.token(sr: NHFixture.root(live), full),
            body: #"{"installationId":"\#(installation)","platform":"apns","pushChannel":"\#(token)"}"#)
        try #require(put.status == 200, "\(put.text)")
        let sent = try await NHFixture.post(
            live, "/\(hub)/messages?api-version=2020-06", full, body: #"{"aps":{"alert":"hi"}}"#,
            headers: [
                ("ServiceBusNotification-Format", "apple"),
                ("ServiceBusNotification-Tags", "$InstallationId:{\(installation)}"),
            ])
        try #require(sent.status == 201, "\(sent.text)")
        return try NHFixture.id(sent.header("Location"))
    }

    /// The hub's APNs status as dispatch answers GetHubCredentials.
    static func apnsStatus(_ live: LiveStack, hub: String) async throws -> HubPlatformCredentials {
        let id = try await RPCClient.with(
            socketPath: live.configuration.socketPath("auth"), transport: live.configuration.rpcTransport,
            timeout: .testRPC
        ) {
            try await AuthServiceClient($0).getHub(GetHubRequest(name: hub)).id
        }
        let answer = try await RPCClient.with(
            socketPath: live.configuration.socketPath("dispatch"), transport: live.configuration.rpcTransport,
            timeout: .testRPC
        ) {
            try await DispatchServiceClient($0).getHubCredentials(GetHubCredentialsRequest(hub: id))
        }
        return try #require(answer.platforms.first { $0.platform == .apns })
    }

    /// Polls until `condition` holds for the hub's APNs status, or 20 s pass; the last status.
    static func waitForStatus(
        _ live: LiveStack, hub: String, _ condition: (HubPlatformCredentials) -> Bool
    ) async throws -> HubPlatformCredentials {
        let deadline = ContinuousClock.now + .seconds(20)
        var status = try await apnsStatus(live, hub: hub)
        while !condition(status), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            status = try await apnsStatus(live, hub: hub)
        }
        return status
    }

    @Test(
        "a certificate-auth hub delivers to nghttpd --verify-client; a hub that presents no certificate there records CertificateRejected"
    )
    func deliversToNghttpd() async throws {
        try await StackFixture.withProviders { fixture, live in
            let made = try await Self.certificates(fixture)
            let nghttpd = try await Nghttpd.start(
                certificate: fixture.tls.certificate, key: fixture.tls.key, verifyClient: true)
            defer { nghttpd.stop() }

            // The certificate set with the CLI from its .p12 file; the topic is the certificate's.
            let full = try await NHFixture.hub("certs", live).full
            let set = try await live.herald([
                "hubs", "credentials", "set", "certs", "apns", "certificate=@\(made.folder)/provider.p12",
                "certificate-password=\(APNsTestCertificates.password)", "url=\(nghttpd.url)",
            ])
            try #require(set.status == 0, "\(set.error)")
            #expect(set.output.contains("topic \(APNsTestCertificates.topic)"), "\(set.output)")
            #expect(set.output.contains("\tends 20"), "the certificate's end: \(set.output)")
            #expect(!set.output.contains(APNsTestCertificates.password))
            let id = try await Self.send(live, hub: "certs", full, installation: "c1", token: apnsToken(2001))
            let outcome = try await NHFixture.finalOutcome(live, notification: id)
            #expect(outcome.state == .completed && outcome.platforms.first?.success == 1, "\(outcome)")
            let status = try await Self.apnsStatus(live, hub: "certs")
            #expect(status.expiresAtUnixMs == made.notValidAfter * 1000)
            #expect(status.lastError.isEmpty && !status.failing)

            // A token-auth hub presents no certificate: nghttpd ends the connection, the hub shows
            // as failing, and the delivery waits for a retry instead of being dropped. (Whether
            // nghttpd's alert is read before its close is TLS 1.3's race: CertificateRejected or
            // ConnectionError. A hub presenting a certificate is told CertificateRejected either
            // way: wrongEndedAndSwitched.)
            let tokenFull = try await NHFixture.hub("tokens", live).full
            let tokenSet = try await live.herald([
                "hubs", "credentials", "set", "tokens", "apns", "key=@\(fixture.folder)/apns.p8",
                "key-id=\(ProviderFixture.keyID)", "team-id=\(ProviderFixture.teamID)",
                "topic=\(ProviderFixture.topic)", "url=\(nghttpd.url)",
            ])
            try #require(tokenSet.status == 0, "\(tokenSet.error)")
            let refused = try await Self.send(
                live, hub: "tokens", tokenFull, installation: "t1", token: apnsToken(2002))
            let failing = try await Self.waitForStatus(live, hub: "tokens") { $0.failing }
            #expect(
                failing.failing && ["CertificateRejected", "ConnectionError"].contains(failing.lastError), "\(failing)")
            let waiting = try await NHFixture.outcome(live, notification: refused)
            #expect(waiting.platforms.first?.pending == 1, "\(waiting)")
        }
    }

    @Test(
        "a wrong certificate is refused by the push service and recorded, an ended one is refused when set, and the right one delivers what waited; token and certificate auth swap without a restart"
    )
    func wrongEndedAndSwitched() async throws {
        try await StackFixture.withProviders(edge: ["--test-mode", "true"]) { fixture, live in
            let made = try await Self.certificates(fixture)
            // APNs with certificate auth: only certificates of its CA, no provider token, the
            // certificate's topic.
            let apple = try await PushDouble.start(
                .tls(certificate: fixture.tls.certificate, key: fixture.tls.key, clientCA: made.ca)
            ) { request in
                guard request.method == "POST", request.path.hasPrefix("/3/device/"),
                    request.header("authorization") == nil,
                    request.header("apns-topic") == APNsTestCertificates.topic
                else { return .json(403, ["reason": "BadCertificate"]) }
                return PushDouble.Reply(status: 200)
            }
            defer { Task { await apple.stop() } }
            #expect(try await live.herald(["hubs", "grant", "default", "ops", "Manage"]).status == 0)
            func put(_ settings: [String: String]) async throws -> EdgeClient.Reply {
                let body = try JSONSerialization.data(withJSONObject: settings)
                return try await live.edge.request(
                    "PUT", "/v1/hubs/swap/credentials/apns", as: "ops", body: String(decoding: body, as: UTF8.self))
            }

            // 1. Token auth to the fixture's APNs double.
            let full = try await NHFixture.hub("swap", live).full
            let token = try await put([
                "key": try String(contentsOfFile: "\(fixture.folder)/apns.p8", encoding: .utf8),
                "keyId": ProviderFixture.keyID, "teamId": ProviderFixture.teamID, "topic": ProviderFixture.topic,
                "url": fixture.double.url,
            ])
            try #require(token.status == 200, "\(token.text)")
            let first = try await Self.send(live, hub: "swap", full, installation: "s1", token: apnsToken(2101))
            #expect(try await NHFixture.finalOutcome(live, notification: first).platforms.first?.success == 1)
            let signed = try await fixture.double.waitFor(1) { $0.path == "/3/device/\(apnsToken(2101))" }
            #expect(signed.first?.header("authorization")?.hasPrefix("bearer ") == true)

            // 2. A certificate from a CA APNs does not know: accepted when set (only APNs can tell),
            // refused in the handshake, recorded as such; the push waits.
            let stranger = try await put([
                "certificate": Data(made.strangerP12).base64EncodedString(),
                "certificatePassword": APNsTestCertificates.password, "url": apple.url,
            ])
            try #require(stranger.status == 200, "\(stranger.text)")
            let second = try await Self.send(live, hub: "swap", full, installation: "s2", token: apnsToken(2102))
            let rejected = try await Self.waitForStatus(live, hub: "swap") { $0.lastError == "CertificateRejected" }
            #expect(rejected.lastError == "CertificateRejected", "\(rejected)")
            #expect(apple.requests.isEmpty)
            let waiting = try await NHFixture.outcome(live, notification: second)
            #expect(waiting.platforms.first?.pending == 1, "\(waiting)")

            // 3. An ended certificate is refused when set, saying so; the one in place stays.
            let ended = try await put([
                "certificate": Data(made.expiredP12).base64EncodedString(),
                "certificatePassword": APNsTestCertificates.password, "url": apple.url,
            ])
            #expect(ended.status == 400 && ended.text.contains("ended on"), "\(ended.text)")
            let wrongPassword = try await put([
                "certificate": Data(made.p12).base64EncodedString(), "certificatePassword": "guess", "url": apple.url,
            ])
            #expect(wrongPassword.status == 400 && !wrongPassword.text.contains("guess"), "\(wrongPassword.text)")

            // 4. The right certificate (PEM this time): the push that waited is delivered, with no
            // provider token, on the certificate's topic.
            let right = try await put(["certificate": Data(made.pem).base64EncodedString(), "url": apple.url])
            try #require(right.status == 200, "\(right.text)")
            #expect(right.text.contains(#""expiresAtUnixMs":\#(made.notValidAfter * 1000)"#), "\(right.text)")
            let delivered = try await NHFixture.finalOutcome(live, notification: second)
            #expect(delivered.platforms.first?.success == 1, "\(delivered)")
            #expect(apple.requests.map(\.path) == ["/3/device/\(apnsToken(2102))"])

            // 5. Back to token auth: no end any more, and pushes are signed again.
            let back = try await put([
                "key": try String(contentsOfFile: "\(fixture.folder)/apns.p8", encoding: .utf8),
                "keyId": ProviderFixture.keyID, "teamId": ProviderFixture.teamID, "topic": ProviderFixture.topic,
                "url": fixture.double.url,
            ])
            try #require(back.status == 200, "\(back.text)")
            #expect(try await Self.apnsStatus(live, hub: "swap").expiresAtUnixMs == 0)
            let third = try await Self.send(live, hub: "swap", full, installation: "s3", token: apnsToken(2103))
            #expect(try await NHFixture.finalOutcome(live, notification: third).platforms.first?.success == 1)
            #expect(try await fixture.double.waitFor(1) { $0.path == "/3/device/\(apnsToken(2103))" }.count == 1)

            // Both kinds at once are refused, naming the clash.
            let both = try await put([
                "key": "x", "certificate": Data(made.pem).base64EncodedString(), "url": apple.url,
            ])
            #expect(both.status == 400 && both.text.contains("not both"), "\(both.text)")
        }
    }
}
