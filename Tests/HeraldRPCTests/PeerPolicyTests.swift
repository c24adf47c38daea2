import Foundation
import HeraldLeanTransport
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldTestSupport
import Logging
import NIOCore
import NIOEmbedded
import NIOPosix
import ServiceLifecycle
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Who may call a service over its Unix sockets (SO_PEERCRED): the settings, the rule, and both
/// transports refusing a process the policy does not list, over real sockets. A peer whose
/// credentials cannot be read is refused, not let through.
@Suite("peer credentials", .timeLimit(.minutes(2)), .watchedForStalls)
struct PeerPolicyTests {
    @Test("allow-uids defaults to this process's user; both settings are comma-separated numbers, or refused")
    func settings() throws {
        let defaults = try PeerPolicy(reader: ConfigReader(arguments: []))
        #expect(defaults.uids == [getuid()] && defaults.gids.isEmpty)
        let listed = try PeerPolicy(
            reader: ConfigReader(arguments: ["--allow-uids", " 1000, 1001,", "--allow-gids", "50"]))
        #expect(listed.uids == [1000, 1001] && listed.gids == [50])
        let fromEnvironment = try PeerPolicy(
            reader: ConfigReader(arguments: [], environment: ["HERALD_ALLOW_UIDS": "7"]))
        #expect(fromEnvironment.uids == [7])
        for bad in ["-1", "root", "1000;1001", "4294967296", "1e3"] {
            #expect(throws: ConfigError.self, "\(bad)") {
                try PeerPolicy(reader: ConfigReader(arguments: ["--allow-uids", bad]))
            }
            #expect(throws: ConfigError.self, "\(bad)") {
                try PeerPolicy(reader: ConfigReader(arguments: ["--allow-gids", bad]))
            }
        }
        #expect(PeerPolicy.keys == ["allow-uids", "allow-gids"])
    }

    @Test("a peer is allowed by its user or by its group")
    func rule() {
        let policy = PeerPolicy(uids: [1000], gids: [2000])
        #expect(policy.allows(uid: 1000, gid: 1))
        #expect(policy.allows(uid: 5, gid: 2000))
        #expect(!policy.allows(uid: 5, gid: 1))
        #expect(!PeerPolicy(uids: []).allows(uid: 0, gid: 0), "an empty policy allows no one, root included")
    }

    @Test("a channel whose peer's credentials cannot be read is refused")
    func unreadable() throws {
        let channel = EmbeddedChannel()
        let refusal = try PeerPolicy(uids: [getuid()]).refusal(for: channel).wait()
        #expect(refusal == "the peer's credentials cannot be read")
        _ = try? channel.finish()
    }

    /// A server of `transport` on a fresh socket with `peers`, one Authenticate handler, and a
    /// client's first call's result.
    /// `timeout`: a minute for calls that should succeed (CI runs this beside a hundred service
    /// processes); a refused gRPC caller waits all of it for an answer that never comes.
    static func call(_ transport: RPCTransport, peers: PeerPolicy, timeout: Duration = .seconds(60)) async throws
        -> Result<String, ServiceError>
    {
        var template = Array("/tmp/herald-peer-XXXXXX".utf8CString)
        let dir = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let socket = dir + "/peer.sock"
        var table = MethodTable()
        table.register(AuthServiceMethods.authenticate) { request, _ in AuthenticateResponse(user: "served") }
        let logger = Logger(label: "test")
        let server: any Service =
            transport == .lean
            ? LeanServer(table: table, socketPath: socket, logger: logger, peers: peers)
            : try RPCServer(table: table, socketPath: socket, logger: logger, peers: peers)
        let running = Task { try await server.run() }
        defer { running.cancel() }
        // The socket appears once the server listens: polled with a deadline.
        let deadline = ContinuousClock.now + .seconds(60)
        while !FileManager.default.fileExists(atPath: socket) {
            try #require(ContinuousClock.now < deadline, "the server never listened")
            try await Task.sleep(for: .milliseconds(10))
        }
        return try await RPCClient.with(socketPath: socket, transport: transport, timeout: timeout) { client in
            do {
                return .success(try await AuthServiceClient(client).authenticate(AuthenticateRequest()).user)
            } catch let error as ServiceError {
                return .failure(error)
            }
        }
    }

    @Test("lean: a process the policy lists is served; one it does not is refused PERMISSION_DENIED, saying why")
    func lean() async throws {
        #expect(try await Self.call(.lean, peers: PeerPolicy(uids: [getuid()])) == .success("served"))
        #expect(try await Self.call(.lean, peers: PeerPolicy(uids: [], gids: [getgid()])) == .success("served"))
        let refused = try await Self.call(.lean, peers: PeerPolicy(uids: [getuid() &+ 1]))
        guard case .failure(let error) = refused else {
            Issue.record("served a process the policy does not list")
            return
        }
        #expect(error.code == .permissionDenied, "\(error)")
        #expect(error.message.contains("uid \(getuid())"), "\(error.message)")
    }

    @Test("gRPC: a process the policy does not list gets no answer (its connection is closed)")
    func grpc() async throws {
        #expect(try await Self.call(.grpc, peers: PeerPolicy(uids: [getuid()])) == .success("served"))
        let refused = try await Self.call(.grpc, peers: PeerPolicy(uids: [getuid() &+ 1]), timeout: .seconds(5))
        guard case .failure(let error) = refused else {
            Issue.record("served a process the policy does not list")
            return
        }
        #expect(error.code == .unavailable || error.code == .deadlineExceeded, "\(error)")
    }
}
