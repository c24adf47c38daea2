import Foundation
import HeraldModel
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A 64-bit counter in a small file that several processes on one host map into memory.
///
/// herald-auth bumps `auth.generation` (beside its sockets) after it commits any change that could
/// turn a verdict (a revocation, a password change, a grant, a failed login) and before it answers
/// the call; herald-edge reuses a verdict only while the counter still reads what it read before
/// asking for that verdict. So a revocation answered to anyone already holds at the edge, at the
/// cost of one atomic load per request: no RPC, no stream of events that could lag behind.
///
/// Why a mapped file rather than a message from auth: a message arrives after auth has answered,
/// so for a moment a revoked token would still work. Shared memory is visible at once, but only
/// on one host (one kernel, one page cache); the edge therefore caches only when every auth it
/// calls is a Unix socket whose directory holds this file (see `AuthVerdictCache` in Edge).
///
/// The counter only grows. Its file is never truncated or removed by Herald; a reader still checks
/// the file's identity from time to time (``isStillAt(path:)``) in case someone replaced it.
public final class SharedGeneration: @unchecked Sendable {
    /// The file's name in each directory holding one of herald-auth's sockets.
    public static let authFileName = "auth.generation"

    /// herald-auth's counter file for the socket at `socket`: ``authFileName`` in its directory.
    /// herald-auth writes one beside each socket it serves; herald-edge reads the one beside each
    /// auth socket it calls.
    public static func authPath(besideSocket socket: String) -> String {
        URL(fileURLWithPath: socket).deletingLastPathComponent().appendingPathComponent(authFileName).path
    }

    /// `@unchecked Sendable`: the mapping is immutable after init and only touched through `Atomic`.
    private let mapping: UnsafeMutableRawPointer
    private let counter: UnsafeMutablePointer<Atomic<UInt64>>
    private let identity: (device: UInt64, inode: UInt64)
    private static let length = 4096

    /// Maps the counter of `path`: read-write, creating the file (mode 0644: the edge may run as
    /// another user, and a counter is no secret) when `writable`; read-only otherwise, and nil when
    /// the file is not there or too short to hold a counter yet.
    public init?(path: String, writable: Bool) throws {
        let fd = writable ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644) : open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if !writable, errno == ENOENT { return nil }
            throw ConfigError("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else {
            throw ConfigError("cannot stat \(path): \(String(cString: strerror(errno)))")
        }
        if status.st_size < Self.length {
            guard writable else { return nil }
            guard ftruncate(fd, off_t(Self.length)) == 0 else {
                throw ConfigError("cannot size \(path): \(String(cString: strerror(errno)))")
            }
        }
        let protection = writable ? PROT_READ | PROT_WRITE : PROT_READ
        guard let mapped = mmap(nil, Self.length, protection, MAP_SHARED, fd, 0), mapped != MAP_FAILED else {
            throw ConfigError("cannot map \(path): \(String(cString: strerror(errno)))")
        }
        mapping = mapped
        counter = mapped.bindMemory(to: Atomic<UInt64>.self, capacity: 1)
        identity = (UInt64(status.st_dev), UInt64(status.st_ino))
    }

    deinit { munmap(mapping, Self.length) }

    /// The counter now.
    @inline(__always)
    public func load() -> UInt64 { counter.pointee.load(ordering: .acquiring) }

    /// Adds one; every reader's next ``load()`` sees it.
    public func bump() { counter.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent) }

    /// Whether `path` is still the file this maps (not removed or replaced since).
    public func isStillAt(path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0 && UInt64(status.st_dev) == identity.device
            && UInt64(status.st_ino) == identity.inode
    }
}
