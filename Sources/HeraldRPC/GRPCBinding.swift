import Foundation
import GRPCCore
import HeraldModel
import HeraldTelemetry
import Logging
import Synchronization

/// Serves a ``MethodTable`` over standard gRPC (grpc-swift-2), so any gRPC client can call every RPC.
///
/// The table is bytes-in, bytes-out; this binding only frames it. Herald's own request id travels
/// in the `x-request-id` metadata key.
struct GRPCBinding: RegistrableRPCService {
    let table: MethodTable
    let logger: Logger
    /// Set when the server starts draining (see ``cancellable(_:_:)``).
    let draining: DrainFlag

    func registerMethods<Transport: ServerTransport>(with router: inout RPCRouter<Transport>) {
        for (name, handler) in table.handlers {
            // Every name in a method table is `package.Service/Method` (MethodTable checks).
            guard let slash = name.lastIndex(of: "/") else { continue }
            let descriptor = MethodDescriptor(
                fullyQualifiedService: String(name[..<slash]),
                method: String(name[name.index(after: slash)...])
            )
            let logger = self.logger
            router.registerHandler(
                forMethod: descriptor,
                deserializer: RawBytesCoder(),
                serializer: RawBytesCoder()
            ) { request, serverContext in
                var requestID: String?
                for value in request.metadata[stringValues: requestIDKey] {
                    requestID = value
                    break
                }
                var traced: (parent: String?, state: String?) = (nil, nil)
                if HeraldTracing.isOn {
                    traced.parent = request.metadata[stringValues: traceParentKey].first { _ in true }
                    traced.state = request.metadata[stringValues: traceStateKey].first { _ in true }
                }
                let context = RPCContext(
                    requestID: requestID ?? newRequestID(), method: name, logger: logger, traceParent: traced.parent,
                    traceState: traced.state)
                let input = try await Self.singleMessage(request.messages)
                switch handler {
                case .unary(let handle):
                    do {
                        let output = try await Self.cancellable(serverContext.cancellation, draining) {
                            try await handle(input, context)
                        }
                        return StreamingServerResponse(single: ServerResponse(message: output))
                    } catch {
                        throw Self.rpcError(error, context)
                    }
                case .serverStreaming(let handle):
                    return StreamingServerResponse { writer in
                        do {
                            try await Self.cancellable(serverContext.cancellation, draining) {
                                try await handle(input, context) { bytes in try await writer.write(bytes) }
                            }
                        } catch {
                            throw Self.rpcError(error, context)
                        }
                        return [:]
                    }
                }
            }
        }
    }

    /// grpc-swift marks an RPC cancelled (its deadline passed, or the caller went away) without
    /// cancelling the handler's task; this runs the handler in a child task that is cancelled then,
    /// so a handler never works on for a caller that has given up.
    ///
    /// The transport raises the same signal on every RPC when the server starts a graceful shutdown,
    /// as a hint to long-running calls; then it is ignored, so in-flight calls finish (the service
    /// group's drain timeout still bounds them).
    private static func cancellable<T: Sendable>(
        _ cancellation: ServerContext.RPCCancellationHandle,
        _ draining: DrainFlag,
        _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await cancellation.cancelled
                if draining.isDraining {
                    try await Task.sleep(for: .seconds(365 * 86400))  // until the handler finishes
                }
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else { throw CancellationError() }
            return value
        }
    }

    private static func singleMessage(_ messages: RPCAsyncSequence<[UInt8], any Error>) async throws -> [UInt8] {
        var input: [UInt8]?
        for try await message in messages {
            guard input == nil else {
                throw RPCError(code: .invalidArgument, message: "expected exactly one request message")
            }
            input = message
        }
        guard let input else { throw RPCError(code: .invalidArgument, message: "missing request message") }
        return input
    }

    /// A handler's error as a gRPC status (``ServiceError/answering(_:in:)`` decides which).
    static func rpcError(_ error: any Error, _ context: RPCContext) -> RPCError {
        let serviceError = ServiceError.answering(error, in: context)
        var metadata = Metadata()
        for (key, value) in serviceError.metadata.sorted(by: { $0.key < $1.key }) {
            metadata.addString(value, forKey: key)
        }
        return RPCError(code: serviceError.code.rpcCode, message: serviceError.message, metadata: metadata)
    }
}

/// Whether a server has begun its graceful shutdown.
final class DrainFlag: Sendable {
    private let flag = Atomic(false)
    var isDraining: Bool { flag.load(ordering: .acquiring) }
    func set() { flag.store(true, ordering: .releasing) }
}

extension StatusCode {
    var rpcCode: RPCError.Code {
        switch self {
        case .ok, .unknown: .unknown
        case .cancelled: .cancelled
        case .invalidArgument: .invalidArgument
        case .deadlineExceeded: .deadlineExceeded
        case .notFound: .notFound
        case .alreadyExists: .alreadyExists
        case .permissionDenied: .permissionDenied
        case .resourceExhausted: .resourceExhausted
        case .failedPrecondition: .failedPrecondition
        case .aborted: .aborted
        case .outOfRange: .outOfRange
        case .unimplemented: .unimplemented
        case .internal: .internalError
        case .unavailable: .unavailable
        case .dataLoss: .dataLoss
        case .unauthenticated: .unauthenticated
        }
    }

    init(_ code: RPCError.Code) {
        self = StatusCode(rawValue: code.rawValue) ?? .unknown
    }
}
