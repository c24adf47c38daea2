package import GRPCCore

/// Passes message bytes through untouched: the method table (HeraldRPC's gRPC binding) and the
/// OTLP exporter encode and decode themselves.
package struct RawBytesCoder: MessageSerializer, MessageDeserializer {
    package init() {}

    package func serialize<Bytes: GRPCContiguousBytes>(_ message: [UInt8]) throws -> Bytes {
        Bytes(message)
    }

    package func deserialize<Bytes: GRPCContiguousBytes>(_ serializedMessageBytes: Bytes) throws -> [UInt8] {
        serializedMessageBytes.withUnsafeBytes { Array($0) }
    }
}
