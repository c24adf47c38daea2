import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import NIOSSL
import Testing

@testable import PushProviders

/// APNs certificate-based auth: reading the .p12 or PEM, the topic and end the certificate names,
/// and what a certificate that cannot be used does. Delivery over TLS client authentication, to
/// nghttpd and to a double that checks the certificate, is in StackTests' `APNsCertificateTests`.
@Suite("APNs certificates: .p12 and PEM, topic and end, refusals", .watchedForStalls)
struct APNsCertificateTests {
    static func certificates() async throws -> APNsTestCertificates {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("apns-cert-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return try await APNsTestCertificates.make(in: folder)
    }

    @Test("a .p12 exported with its password and a PEM file give the same certificate, topic and end")
    func readsP12AndPEM() async throws {
        let made = try await Self.certificates()
        defer { try? FileManager.default.removeItem(atPath: made.folder) }
        let fromP12 = try APNsCertificate(file: made.p12, password: APNsTestCertificates.password)
        #expect(fromP12.topic == APNsTestCertificates.topic)
        #expect(fromP12.commonName == "Apple Push Services: \(APNsTestCertificates.topic)")
        #expect(fromP12.notValidAfter == made.notValidAfter)
        // The leaf, then the CA the export carried.
        #expect(fromP12.chain.count == 2)
        #expect(!fromP12.expired(at: unixSeconds()))

        let fromPEM = try APNsCertificate(file: made.pem, password: "")
        #expect(fromPEM.topic == fromP12.topic)
        #expect(fromPEM.notValidAfter == fromP12.notValidAfter)
        #expect(try fromPEM.chain[0].toDERBytes() == fromP12.chain[0].toDERBytes())
    }

    @Test("a wrong password, a file that is no certificate, a PEM without its key or with another key are refused")
    func refusals() async throws {
        let made = try await Self.certificates()
        defer { try? FileManager.default.removeItem(atPath: made.folder) }
        func problem(_ file: [UInt8], _ password: String) -> String? {
            do {
                _ = try APNsCertificate(file: file, password: password)
                return nil
            } catch {
                return String(describing: error)
            }
        }
        let wrongPassword = try #require(problem(made.p12, "not the password"))
        #expect(wrongPassword.contains("password"))
        #expect(!wrongPassword.contains("not the password"))
        #expect(problem(Array("hello".utf8), "") != nil)
        #expect(problem([], "") != nil)
        #expect(problem(Array(repeating: 0x30, count: APNsCertificate.maximumSize + 1), "")?.contains("64 KiB") == true)

        let certificateOnly = try Array(Data(contentsOf: URL(fileURLWithPath: "\(made.folder)/provider.pem")))
        #expect(problem(certificateOnly, "")?.contains("no private key") == true)
        let otherKey = try Array(Data(contentsOf: URL(fileURLWithPath: "\(made.folder)/stranger.key")))
        #expect(problem(certificateOnly + otherKey, "")?.contains("not the certificate's") == true)
    }

    @Test("an ended certificate is read, and its batches are retried as CertificateExpired without a connection")
    func expiredCertificateRetries() async throws {
        let made = try await Self.certificates()
        defer { try? FileManager.default.removeItem(atPath: made.folder) }
        let certificate = try APNsCertificate(file: made.expiredP12, password: APNsTestCertificates.password)
        #expect(certificate.expired(at: unixSeconds()))
        let client = PushHTTP.makeClient(extraCAFile: made.ca, connectTimeout: .milliseconds(200))
        defer { Task { try? await client.shutdown() } }
        // Nothing listens on port 9: a connection attempt would answer ConnectionError instead.
        let sender = try APNsSender(
            credentials: APNsCredentials(
                auth: .certificate(certificate), topic: APNsTestCertificates.topic, baseURL: "https://127.0.0.1:9"),
            client: client, token: nil, timeout: .seconds(2))
        let item = PushItem(
            sequence: 1, notificationID: "n1", registrationID: "r1", platform: .apns,
            handle: String(repeating: "ab", count: 32), messageID: "3E1C2C63-6F0B-4C0D-9E6B-1B1B0C0F7A11",
            attempt: 1, giveUpAt: Int64.max,
            payload: OutboxPayload(
                platform: .apns, options: DeliveryOptions(pushType: "alert", priority: 10),
                body: Array(#"{"aps":{}}"#.utf8)))
        let results = await sender.send([item, item])
        #expect(
            results == Array(repeating: .retry(status: 0, reason: APNsSender.certificateExpired, after: nil), count: 2))
    }

    @Test("a TLS alert about this side's certificate is CertificateRejected; any other failure ConnectionError")
    func rejectionReason() {
        #expect(
            HTTP2Pool.reason(for: NIOSSLError.handshakeFailed(.sslError([]))) == "ConnectionError")
        struct Described: Error, CustomStringConvertible { var description: String }
        for alert in ["SSLV3_ALERT_BAD_CERTIFICATE", "TLSV1_ALERT_UNKNOWN_CA", "TLSV1_ALERT_CERTIFICATE_REQUIRED"] {
            #expect(HTTP2Pool.reason(for: Described(description: "handshakeFailed(\(alert))")) == "CertificateRejected")
        }
        // Our own refusal of the service's certificate is not the service refusing ours.
        #expect(HTTP2Pool.reason(for: Described(description: "CERTIFICATE_VERIFY_FAILED")) == "ConnectionError")
    }
}
