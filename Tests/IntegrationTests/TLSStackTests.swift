import Foundation
import HeraldModel
import HeraldRPC
import HeraldService
import HeraldStack
import Testing

/// The same secure-push sequence with the services calling each other over TCP + mutual TLS
/// instead of Unix sockets (the callers' socket settings point nowhere, so TCP is the only way).
@Suite("TLS over TCP end to end", .serialized, .timeLimit(.minutes(3)))
struct TLSStackTests {
    /// A throw-away CA and one certificate for 127.0.0.1 (server and client use), made with openssl.
    static func makeCertificates(in folder: String) async throws -> StackTLS {
        let openssl = try #require(which("openssl"), "openssl is needed to make test certificates")
        func run(_ arguments: [String]) async throws {
            let result = try await runProgram(openssl, arguments)
            try #require(result.status == 0, "openssl \(arguments.first ?? ""): \(result.error)")
        }
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try await run(
            ["req", "-x509"] + ec + [
                "-keyout", "\(folder)/ca.key", "-out", "\(folder)/ca.pem", "-days", "2", "-subj", "/CN=herald-test-ca",
            ])
        try await run(
            ["req"] + ec + [
                "-keyout", "\(folder)/service.key", "-out", "\(folder)/service.csr", "-subj", "/CN=herald-test",
            ])
        try """
        basicConstraints=CA:FALSE
        subjectAltName=IP:127.0.0.1,DNS:localhost
        extendedKeyUsage=serverAuth,clientAuth

        """.write(toFile: "\(folder)/service.ext", atomically: true, encoding: .utf8)
        try await run([
            "x509", "-req", "-in", "\(folder)/service.csr", "-CA", "\(folder)/ca.pem", "-CAkey", "\(folder)/ca.key",
            "-CAcreateserial", "-out", "\(folder)/service.pem", "-days", "2", "-extfile", "\(folder)/service.ext",
        ])
        return StackTLS(certificate: "\(folder)/service.pem", key: "\(folder)/service.key", ca: "\(folder)/ca.pem")
    }

    @Test(
        "a TLS-over-TCP stack passes the same secure-push sequence, with peers listed by address or named dns:///localhost:port",
        .storeIndependent, arguments: RPCTransport.allCases, [false, true])
    func secureSequenceOverTLS(_ transport: RPCTransport, byName: Bool) async throws {
        let directory = try LiveStack.makeDirectory()
        let certificates = directory + "/tls"
        try FileManager.default.createDirectory(atPath: certificates, withIntermediateDirectories: true)
        let tls = try await Self.makeCertificates(in: certificates)
        try await LiveStack.with(
            directory: directory,
            configure: {
                $0.tls = tls
                $0.rpcTransport = transport
                $0.peersByName = byName
            }
        ) { live in
            try await SecurePushTests.secureSequence(live)
            let edgeLog = try String(contentsOfFile: "\(live.configuration.logDirectory)/payload.log", encoding: .utf8)
            #expect(edgeLog.contains("herald.tls=true") || transport == .grpc, "payload did not listen with TLS")
        }
    }
}
