internal import CHeraldProto
import GRPCCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// What generated code needs to move a message between Swift and its protobuf-c struct.
protocol CBacked: HeraldMessage {
    associatedtype CType
    /// Copies everything out of an unpacked C message (which the caller frees afterwards).
    init(_c pointer: UnsafePointer<CType>)
    /// Builds the C message in `arena`; every allocation belongs to the arena.
    func _toC(_ arena: CArena) throws -> UnsafeMutablePointer<CType>
    static func _packedSize(_ p: UnsafePointer<CType>) -> Int
    static func _pack(_ p: UnsafePointer<CType>, _ out: UnsafeMutablePointer<UInt8>) -> Int
    static func _unpack(_ count: Int, _ data: UnsafePointer<UInt8>) -> UnsafeMutablePointer<CType>?
    static func _free(_ p: UnsafeMutablePointer<CType>)
}

/// Owns every C allocation made to encode one message, and frees them all when encoding is done.
///
/// protobuf-c packs from a tree of C structs, strings and arrays; building that tree allocates, and
/// an arena makes "free everything after packing" one `deinit` instead of a free per field.
final class CArena {
    private var allocations: [UnsafeMutableRawPointer] = []

    deinit {
        for pointer in allocations { pointer.deallocate() }
    }

    /// Zeroed storage for `count` values of `T`.
    func allocate<T>(_ type: T.Type, count: Int = 1) -> UnsafeMutablePointer<T> {
        // Swift's allocator rather than calloc: it has no nil to unwrap (it stops the process
        // itself when memory runs out, as every other allocation here would).
        let bytes = max(count, 1) * MemoryLayout<T>.stride
        let raw = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: MemoryLayout<T>.alignment)
        raw.initializeMemory(as: UInt8.self, repeating: 0, count: bytes)
        allocations.append(raw)
        return raw.bindMemory(to: T.self, capacity: max(count, 1))
    }

    /// A NUL-terminated copy of `string`. Refuses embedded NULs, which C would silently cut off.
    func string(_ string: String, field: String) throws -> UnsafeMutablePointer<CChar> {
        let utf8 = string.utf8
        let count = utf8.count
        let p = allocate(CChar.self, count: count + 1)
        p.withMemoryRebound(to: UInt8.self, capacity: count + 1) { bytes in
            _ = UnsafeMutableBufferPointer(start: bytes, count: count).initialize(from: utf8)
        }
        // Checked on the copy with memchr: `utf8.contains(0)` walked the string a byte at a time.
        if memchr(p, 0, count) != nil { throw ProtoError.embeddedNUL(field: field) }
        return p
    }

    /// An array of C strings.
    func strings(_ strings: [String], field: String) throws -> UnsafeMutablePointer<UnsafeMutablePointer<CChar>?> {
        let array = allocate(UnsafeMutablePointer<CChar>?.self, count: strings.count)
        for (i, s) in strings.enumerated() { array[i] = try string(s, field: field) }
        return array
    }

    /// A copy of `bytes` as protobuf-c's `ProtobufCBinaryData`.
    func binary(_ bytes: [UInt8]) -> ProtobufCBinaryData {
        let p = allocate(UInt8.self, count: bytes.count)
        bytes.withUnsafeBufferPointer { src in
            if let base = src.baseAddress { p.update(from: base, count: src.count) }
        }
        return ProtobufCBinaryData(len: bytes.count, data: p)
    }

    /// A C array holding `values`.
    func array<T>(_ values: [T]) -> UnsafeMutablePointer<T> {
        let p = allocate(T.self, count: values.count)
        for (i, v) in values.enumerated() { (p + i).initialize(to: v) }
        return p
    }
}

/// Conversions used by generated code, in one place so each is written (and checked) once.
enum CBridge {
    static func string(_ p: UnsafeMutablePointer<CChar>?) -> String {
        guard let p else { return "" }
        return String(cString: p)
    }

    static func strings(_ count: Int, _ p: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> [String] {
        guard let p else { return [] }
        return (0..<count).map { string(p[$0]) }
    }

    static func bytes(_ data: ProtobufCBinaryData) -> [UInt8] {
        guard data.len > 0, let base = data.data else { return [] }
        return Array(UnsafeBufferPointer(start: base, count: data.len))
    }

    static func array<T>(_ count: Int, _ p: UnsafeMutablePointer<T>?) -> [T] {
        guard let p, count > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: p, count: count))
    }

    /// Packs `message` straight into a buffer of the caller's byte type; frees every C allocation.
    static func encode<M: CBacked, Bytes: GRPCContiguousBytes>(_ message: M) throws -> Bytes {
        let arena = CArena()
        let c = try message._toC(arena)
        let size = M._packedSize(c)
        var bytes = Bytes(repeating: 0, count: size)
        if size > 0 {
            let written = bytes.withUnsafeMutableBytes { raw in
                raw.baseAddress.map { M._pack(c, $0.assumingMemoryBound(to: UInt8.self)) } ?? 0
            }
            guard written == size else { throw ProtoError.packedSize(written: written, expected: size) }
        }
        withExtendedLifetime(arena) {}
        return bytes
    }

    /// Unpacks, copies everything out into Swift values, then frees the unpacked C message.
    static func decode<M: CBacked, Bytes: GRPCContiguousBytes>(_ type: M.Type, from bytes: Bytes) throws -> M {
        try bytes.withUnsafeBytes { raw in
            // protobuf-c wants a valid pointer even for zero bytes.
            var empty: UInt8 = 0
            let unpacked: UnsafeMutablePointer<M.CType>? =
                if let base = raw.baseAddress, raw.count > 0 {
                    M._unpack(raw.count, base.assumingMemoryBound(to: UInt8.self))
                } else {
                    M._unpack(0, &empty)
                }
            guard let unpacked else { throw ProtoError.malformed(M.protoName) }
            defer { M._free(unpacked) }
            return M(_c: unpacked)
        }
    }
}
