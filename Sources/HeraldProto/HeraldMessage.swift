public import GRPCCore

/// A Herald protobuf message: a Swift value type whose wire form is produced by protobuf-c.
///
/// Every message type in `proto/` conforms through generated code (`Generated/`). The protocol says
/// nothing about C, so no module but this one ever sees a C pointer.
public protocol HeraldMessage: Sendable, Hashable {
    /// An empty message: every field at its proto3 default.
    init()
    /// Decodes the protobuf wire form. Throws ``ProtoError/malformed(_:)`` on bytes protobuf-c rejects.
    init<Bytes: GRPCContiguousBytes>(serializedBytes: Bytes) throws
    /// Encodes to the protobuf wire form. Throws ``ProtoError/embeddedNUL(field:)`` for a string that
    /// protobuf-c cannot carry.
    func serializedBytes<Bytes: GRPCContiguousBytes>() throws -> Bytes
    /// The fully qualified proto name, e.g. "herald.v1.Registration".
    static var protoName: String { get }
}

/// Why a message could not be encoded or decoded.
public enum ProtoError: Error, Hashable, CustomStringConvertible {
    /// The bytes are not a valid encoding of the named message.
    case malformed(String)
    /// A string field holds a NUL character: protobuf-c strings are C strings and would be cut there,
    /// so Herald refuses to send them rather than silently lose data.
    case embeddedNUL(field: String)
    /// protobuf-c packed another number of bytes than it had sized (a bug, reported, not trapped).
    case packedSize(written: Int, expected: Int)

    public var description: String {
        switch self {
        case .malformed(let name): "malformed \(name) message"
        case .embeddedNUL(let field): "string field \(field) contains a NUL character"
        case .packedSize(let written, let expected): "protobuf-c packed \(written) of \(expected) bytes"
        }
    }
}

/// grpc-swift-2 serializer for any ``HeraldMessage``.
public struct HeraldSerializer<Message: HeraldMessage>: MessageSerializer {
    public init() {}

    public func serialize<Bytes: GRPCContiguousBytes>(_ message: Message) throws -> Bytes {
        do {
            return try message.serializedBytes()
        } catch let error as ProtoError {
            throw RPCError(code: .invalidArgument, message: error.description)
        }
    }
}

/// grpc-swift-2 deserializer for any ``HeraldMessage``.
public struct HeraldDeserializer<Message: HeraldMessage>: MessageDeserializer {
    public init() {}

    public func deserialize<Bytes: GRPCContiguousBytes>(_ serializedMessageBytes: Bytes) throws -> Message {
        do {
            return try Message(serializedBytes: serializedMessageBytes)
        } catch let error as ProtoError {
            throw RPCError(code: .invalidArgument, message: error.description)
        }
    }
}

/// A unary RPC of a Herald service, typed by its request and response messages.
public struct UnaryMethod<Request: HeraldMessage, Response: HeraldMessage>: Sendable, Hashable {
    /// Fully qualified service name, e.g. "herald.v1.PayloadService".
    public let service: String
    /// Method name, e.g. "FetchPayload".
    public let method: String
    /// "herald.v1.PayloadService/FetchPayload": the key of the method table and of gRPC routing.
    public var fullName: String { "\(service)/\(method)" }

    public init(service: String, method: String) {
        self.service = service
        self.method = method
    }
}

/// A server-streaming RPC of a Herald service (one request, a stream of responses).
public struct ServerStreamingMethod<Request: HeraldMessage, Response: HeraldMessage>: Sendable, Hashable {
    /// Fully qualified service name.
    public let service: String
    /// Method name.
    public let method: String
    /// "package.Service/Method".
    public var fullName: String { "\(service)/\(method)" }

    public init(service: String, method: String) {
        self.service = service
        self.method = method
    }
}
