import Crypto
import DispatchService
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldService
import HeraldTestSupport
import Logging
import MetricsTestKit
import PushProviders
import Testing

/// Hubs' senders as replicas refresh them from the shared store, beside the RPCs that change them.
@Suite("hub senders", .watchedForStalls)
struct HubSendersTests {
    static let wns = PlatformCredentials.wns(clientID: "c", clientSecret: "s", tokenURL: "https://127.0.0.1:1/token")

    static func stored(_ hub: String, updatedAt: Int64) throws -> [StoredCredentials] {
        let settings = ["client-id": "c", "client-secret": "s", "token-url": "https://127.0.0.1:1/token"]
        return [
            StoredCredentials(
                hub: hub, platform: .wns,
                request: .success(try SetHubCredentialsRequest(hub: hub, platform: .wns, settings: settings)),
                updatedAt: updatedAt)
        ]
    }

    static func withSenders(_ body: (HubSenders) async throws -> Void) async throws {
        let client = PushHTTP.makeClient(extraCAFile: nil)
        let inbox = try InboxProvider(db: .inMemory())
        let senders = HubSenders(defaults: [.wns: inbox], inbox: inbox, client: client, timeout: .seconds(1))
        do {
            try await body(senders)
            try await client.shutdown()
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// The CI failure this pins: a periodic refresh read the store just before an RPC stored a
    /// hub's APNs key, and then removed the sender that RPC had put in place; the next send went
    /// to the inbox instead of APNs.
    @Test("a refresh of a snapshot read before an RPC's change leaves that change as it is")
    func staleSnapshots() async throws {
        try await Self.withSenders { senders in
            let logger = Logger(label: "test")
            // Set by an RPC while a refresh's read of the store (which did not see it yet) was under way.
            let readStarted = ContinuousClock.now
            let sender = try await senders.prepare(hub: "shop", Self.wns)
            senders.install(hub: "shop", Self.wns, sender, updatedAt: 7, changedHere: true)
            await senders.load([], readSince: readStarted, logger: logger)
            #expect(senders.sender(hub: "shop", platform: .wns) is WNSSender, "the refresh undid the RPC's set")
            // A snapshot read after the change is believed: the row is gone from the store.
            await senders.load([], readSince: ContinuousClock.now, logger: logger)
            #expect(senders.sender(hub: "shop", platform: .wns) is InboxProvider)

            // Removed by an RPC while a refresh read a snapshot that still had the row.
            await senders.load(try Self.stored("shop", updatedAt: 8), readSince: ContinuousClock.now, logger: logger)
            #expect(senders.sender(hub: "shop", platform: .wns) is WNSSender)
            let readStartedAgain = ContinuousClock.now
            senders.remove(hub: "shop", platform: .unspecified)
            await senders.load(try Self.stored("shop", updatedAt: 9), readSince: readStartedAgain, logger: logger)
            #expect(
                senders.sender(hub: "shop", platform: .wns) is InboxProvider, "the refresh brought back removed keys")
        }
    }

    @Test(
        "an APNs certificate's end is a gauge from when it is put in place (by an RPC or a refresh) until a key replaces it or it is deleted"
    )
    func certificateExpiryGauge() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("gauge-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let made = try await APNsTestCertificates.make(in: folder)
        let metrics = TestMetrics()
        let client = PushHTTP.makeClient(extraCAFile: nil)
        defer { Task { try? await client.shutdown() } }
        let inbox = try InboxProvider(db: .inMemory())
        let senders = HubSenders(
            defaults: [.apns: inbox], inbox: inbox, client: client, timeout: .seconds(1), metrics: metrics)
        let label = "herald_tls_certificate_expiry_timestamp_seconds"
        func end(_ hub: String) -> Double? {
            (try? metrics.expectGauge(label, [("use", "apns"), ("hub", hub)]))?.lastValue
        }
        let certificate = [
            "certificate": Data(made.p12).base64EncodedString(), "certificate-password": APNsTestCertificates.password,
            "url": "https://127.0.0.1:1",
        ]
        let key = [
            "key": P256.Signing.PrivateKey().pemRepresentation, "key-id": "KEY1234567", "team-id": "TEAM123456",
            "topic": "com.example.app", "url": "https://127.0.0.1:1",
        ]
        // By an RPC.
        try await senders.set(hub: "shop", try PlatformCredentials.parse(platform: .apns, settings: certificate))
        #expect(end("shop") == Double(made.notValidAfter))
        #expect(
            senders.status(hub: "shop").first { $0.platform == .apns }?.expiresAtUnixMs == made.notValidAfter * 1000)
        // A key in its place: no end.
        try await senders.set(hub: "shop", try PlatformCredentials.parse(platform: .apns, settings: key))
        #expect(end("shop") == nil)
        #expect(senders.status(hub: "shop").first { $0.platform == .apns }?.expiresAtUnixMs == 0)
        // By a refresh from the store, and gone when the store no longer has it.
        let logger = Logger(label: "test")
        let mall = try SetHubCredentialsRequest(hub: "mall", platform: .apns, settings: certificate)
        await senders.load(
            [StoredCredentials(hub: "mall", platform: .apns, request: .success(mall), updatedAt: 5)],
            readSince: ContinuousClock.now,
            logger: logger)
        #expect(end("mall") == Double(made.notValidAfter))
        await senders.load([], readSince: ContinuousClock.now, logger: logger)
        #expect(end("mall") == nil)
        // Deleted by an RPC.
        try await senders.set(hub: "shop", try PlatformCredentials.parse(platform: .apns, settings: certificate))
        #expect(end("shop") != nil)
        senders.remove(hub: "shop", platform: .apns)
        #expect(end("shop") == nil)
    }

    @Test(
        "the deployment's APNs certificate comes from apns-certificate-file and its password file; its topic is the certificate's; a key and a certificate at once is an error"
    )
    func deploymentCertificate() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("deploy-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let made = try await APNsTestCertificates.make(in: folder)
        try "\(APNsTestCertificates.password)\n".write(toFile: "\(folder)/password", atomically: true, encoding: .utf8)
        let arguments = [
            "--apns-certificate-file", "\(folder)/provider.p12", "--apns-certificate-password-file",
            "\(folder)/password",
            "--apns-environment", "sandbox",
        ]
        let config = try DispatchConfig(reader: ConfigReader(arguments: arguments))
        let apns = try #require(config.apns)
        #expect(apns.topic == APNsTestCertificates.topic && apns.baseURL == APNsCredentials.sandbox)
        #expect(apns.certificate?.notValidAfter == made.notValidAfter)

        let metrics = TestMetrics()
        let client = PushHTTP.makeClient(extraCAFile: nil)
        defer { Task { try? await client.shutdown() } }
        let inbox = try InboxProvider(db: .inMemory())
        let made2 = try await config.senders(inbox: inbox, client: client)
        #expect(made2.real == [.apns])
        let senders = HubSenders(
            defaults: made2.senders, inbox: inbox, client: client, timeout: .seconds(1), metrics: metrics)
        #expect(
            try metrics.expectGauge(
                "herald_tls_certificate_expiry_timestamp_seconds", [("use", "apns"), ("hub", "default")]
            ).lastValue == Double(made.notValidAfter))
        #expect(
            senders.status(hub: "default").first { $0.platform == .apns }?.expiresAtUnixMs == made.notValidAfter * 1000)

        #expect(throws: ConfigError.self) {
            _ = try DispatchConfig(
                reader: ConfigReader(arguments: arguments + ["--apns-key-file", "\(folder)/provider.key"]))
        }
        #expect {
            _ = try DispatchConfig(
                reader: ConfigReader(arguments: ["--apns-certificate-file", "\(folder)/provider.p12"]))
        } throws: { error in
            "\(error)".contains("password") && "\(error)".contains("apns-certificate-file")
        }
    }
}
