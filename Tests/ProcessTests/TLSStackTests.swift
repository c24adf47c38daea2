import Foundation
import HeraldModel
import HeraldRPC
import HeraldService
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// The same secure-push sequence with the services calling each other over TCP + mutual TLS
/// instead of Unix sockets (the callers' socket settings point nowhere, so TCP is the only way).
@Suite("TLS over TCP end to end", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct TLSStackTests {

    @Test(
        "a TLS-over-TCP stack passes the same secure-push sequence, with peers listed by address or named dns:///localhost:port",
        .storeIndependent, arguments: RPCTransport.allCases, [false, true])
    func secureSequenceOverTLS(_ transport: RPCTransport, byName: Bool) async throws {
        try await LiveStack.withDirectory { directory in
            let certificates = directory + "/tls"
            try FileManager.default.createDirectory(atPath: certificates, withIntermediateDirectories: true)
            let tls = try await StackFixture.makeCertificates(in: certificates)
            try await LiveStack.with(
                runner: .processes,
                directory: directory,
                configure: {
                    $0.tls = tls
                    $0.rpcTransport = transport
                    $0.peersByName = byName
                }
            ) { live in
                try await StackFixture.secureSequence(live)
                let edgeLog = try String(
                    contentsOfFile: "\(live.configuration.logDirectory)/payload.log", encoding: .utf8)
                #expect(edgeLog.contains("herald.tls=true") || transport == .grpc, "payload did not listen with TLS")
            }
        }
    }
}
