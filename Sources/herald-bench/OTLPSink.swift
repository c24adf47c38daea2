import GRPCCore
import GRPCNIOTransportHTTP2Posix
import HeraldTelemetry
import Synchronization

/// An OTLP/gRPC trace collector on loopback that accepts every `TraceService/Export` and keeps
/// only a count of requests and bytes: the edge scenario's tracing rows pay for making, encoding
/// and sending spans, not for a collector's decoding or storage. Receiving the exports (grpc-swift's
/// HTTP/2 server) still takes CPU on the machine the stacks share: the side-by-side table prints it
/// per traced request (about 4–5 µs, against 60–100 µs for the five services).
final class OTLPSink: RegistrableRPCService, Sendable {
    let exports = Atomic<Int>(0)
    let bytes = Atomic<Int>(0)

    func registerMethods<Transport: ServerTransport>(with router: inout RPCRouter<Transport>) {
        router.registerHandler(
            forMethod: MethodDescriptor(
                fullyQualifiedService: "opentelemetry.proto.collector.trace.v1.TraceService", method: "Export"),
            deserializer: RawBytesCoder(), serializer: RawBytesCoder()
        ) { request, _ in
            for try await message in request.messages {
                self.exports.add(1, ordering: .relaxed)
                self.bytes.add(message.count, ordering: .relaxed)
            }
            // An empty ExportTraceServiceResponse: every span accepted.
            return StreamingServerResponse(single: ServerResponse(message: []))
        }
    }

    /// Serves the sink on a free loopback port for as long as `body` runs; `body` gets the port.
    static func serving<T: Sendable>(_ body: (OTLPSink, Int) async throws -> T) async throws -> T {
        let sink = OTLPSink()
        let server = GRPCServer(
            transport: HTTP2ServerTransport.Posix(
                address: .ipv4(host: "127.0.0.1", port: 0), transportSecurity: .plaintext),
            services: [sink])
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.serve() }
            defer { server.beginGracefulShutdown() }
            guard let port = try await server.listeningAddress?.ipv4?.port else {
                throw BenchError("the OTLP sink did not start")
            }
            return try await body(sink, port)
        }
    }
}
