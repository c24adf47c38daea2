import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import HeraldLeanTransport
import HeraldModel
import HeraldProto
import HeraldTelemetry
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization
import Tracing

extension RPCClient {
    func callOptions(_ timeout: Duration?, failFast: Bool) -> CallOptions {
        var options = CallOptions.defaults
        options.timeout = timeout ?? defaultTimeout
        // Wait for the service to come up within the deadline, unless another replica could take
        // the call (then fail at once: idempotent calls go to it, see withReplica).
        options.waitForReady = !failFast
        options.maxRequestMessageBytes = RPCLimits.maxMessageBytes
        options.maxResponseMessageBytes = RPCLimits.maxMessageBytes
        return options
    }

    /// Encodes a request once for either transport, and refuses one over the message limit before
    /// anything is sent (grpc-swift's client would not; the server would reset the stream).
    func encode<M: HeraldMessage>(_ message: M) throws -> [UInt8] {
        let bytes: [UInt8]
        do {
            bytes = try message.serializedBytes()
        } catch let error as ProtoError {
            throw ServiceError.invalidArgument(error.description)
        }
        guard bytes.count <= RPCLimits.maxMessageBytes else {
            throw ServiceError(
                .resourceExhausted,
                "\(M.protoName) of \(bytes.count) bytes exceeds the limit of \(RPCLimits.maxMessageBytes)")
        }
        return bytes
    }

    func decode<M: HeraldMessage>(_ type: M.Type, _ bytes: [UInt8]) throws -> M {
        do {
            return try M(serializedBytes: bytes)
        } catch {
            throw ServiceError(.internal, "malformed \(M.protoName) from \(socketPath)")
        }
    }

    /// A gRPC failure as a ``ServiceError``, its string trailers carried over as metadata.
    static func serviceError(_ error: RPCError) -> ServiceError {
        var metadata: [String: String] = [:]
        for entry in error.metadata {
            if ServiceError.metadataKeys.contains(entry.key), case .string(let value) = entry.value {
                metadata[entry.key] = value
            }
        }
        return ServiceError(StatusCode(error.code), error.message, metadata: metadata)
    }

    static func metadata(_ requestID: String?, _ trace: PassedOnTrace?) -> Metadata {
        var metadata: Metadata = [:]
        if let requestID { metadata.addString(requestID, forKey: requestIDKey) }
        if let trace {
            metadata.addString(trace.traceparent, forKey: traceParentKey)
            if let state = trace.tracestate { metadata.addString(state, forKey: traceStateKey) }
        }
        return metadata
    }

    static func leanMetadata(_ requestID: String?, _ trace: PassedOnTrace?) -> [LeanMetadataEntry] {
        var entries: [LeanMetadataEntry] = []
        entries.reserveCapacity(3)
        if let requestID { entries.append(LeanMetadataEntry(key: requestIDKey, value: requestID)) }
        if let trace {
            entries.append(LeanMetadataEntry(key: traceParentKey, value: trace.traceparent))
            if let state = trace.tracestate { entries.append(LeanMetadataEntry(key: traceStateKey, value: state)) }
        }
        return entries
    }
}
