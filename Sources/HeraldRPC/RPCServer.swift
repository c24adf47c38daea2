import Foundation
import GRPCCore
import GRPCNIOTransportCore
import GRPCNIOTransportHTTP2Posix
import HeraldLeanTransport
import HeraldModel
public import Logging
public import NIOPosix
public import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#endif

/// A method table served over gRPC on a Unix socket, as a lifecycle service.
///
/// Once bound, the socket is made 0660 and `onListening` runs; on graceful shutdown `health` reports
/// NOT_SERVING, in-flight calls drain, and the socket file is removed.
public final class RPCServer: Service {
    private let server: GRPCServer<HTTP2ServerTransport.Posix>
    private let health: HealthReporter?
    private let endpoint: RPCEndpoint
    private let logger: Logger
    private let onListening: @Sendable () -> Void
    private let draining = DrainFlag()

    /// With `peers`, a connection from a process the policy does not allow is logged and closed
    /// at once (grpc-swift has no per-connection hook that could answer a status instead).
    public convenience init(
        table: MethodTable, socketPath: String, logger: Logger, health: HealthReporter? = nil, peers: PeerPolicy? = nil,
        eventLoopGroup: MultiThreadedEventLoopGroup = .singleton, onListening: @escaping @Sendable () -> Void = {}
    ) throws {
        try self.init(
            table: table, endpoint: .unix(socketPath), tls: nil, logger: logger, health: health, peers: peers,
            eventLoopGroup: eventLoopGroup, onListening: onListening)
    }

    /// On TCP, `tls` (required there) gives the server's identity and, optionally, the client CA.
    /// Connections run on `eventLoopGroup` (as ``LeanServer``'s).
    public init(
        table: MethodTable, endpoint: RPCEndpoint, tls: TLSFiles?, logger: Logger, health: HealthReporter? = nil,
        peers: PeerPolicy? = nil, eventLoopGroup: MultiThreadedEventLoopGroup = .singleton,
        onListening: @escaping @Sendable () -> Void = {}
    ) throws {
        self.health = health
        self.endpoint = endpoint
        self.logger = logger
        self.onListening = onListening
        let address: GRPCNIOTransportCore.SocketAddress
        let security: HTTP2ServerTransport.Posix.TransportSecurity
        var peers = peers
        switch endpoint {
        case .unix(let path):
            address = .unixDomainSocket(path: path)
            security = .plaintext
        case .tcp(let host, let port):
            address = host.contains(":") ? .ipv6(host: host, port: port) : .ipv4(host: host, port: port)
            guard let tls else { throw ConfigError("listening on TCP needs tls-cert and tls-key") }
            security = try tls.grpcServerSecurity()
            peers = nil  // peer credentials exist on Unix sockets only
        }
        let transport = HTTP2ServerTransport.Posix(
            address: address,
            transportSecurity: security,
            config: .defaults { config in
                // Coalescing delays every flush by up to 100 µs; internal calls are latency-bound.
                config.connection.flushCoalescing = nil
                config.rpc.maxRequestPayloadSize = RPCLimits.maxMessageBytes
                if let peers {
                    config.channelDebuggingCallbacks.onAcceptTCPConnection = { channel in
                        peers.refusal(for: channel).flatMap { refusal in
                            guard let refusal else { return channel.eventLoop.makeSucceededVoidFuture() }
                            logger.warning("refused a caller (grpc)", metadata: ["herald.peer": "\(refusal)"])
                            return channel.close()
                        }
                    }
                }
            },
            eventLoopGroup: eventLoopGroup
        )
        self.server = GRPCServer(
            transport: transport, services: [GRPCBinding(table: table, logger: logger, draining: draining)])
    }

    public func run() async throws {
        let socketPath = endpoint.unixPath
        defer { if let socketPath { unlink(socketPath) } }
        try await withGracefulShutdownHandler {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await self.server.serve() }
                if try await server.listeningAddress != nil {
                    if let socketPath { chmod(socketPath, 0o660) }
                    logger.info("listening (grpc)", metadata: ["herald.endpoint": "\(endpoint)"])
                    onListening()
                }
                try await group.waitForAll()
            }
        } onGracefulShutdown: {
            self.logger.info("draining")
            self.draining.set()
            self.health?.beginDraining()
            self.server.beginGracefulShutdown()
        }
    }
}
