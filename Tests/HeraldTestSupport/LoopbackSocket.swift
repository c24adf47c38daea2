#if canImport(Glibc)
    import Glibc
#endif

/// A TCP socket bound to a port of 127.0.0.1 the kernel picks (another test process may take any
/// other port), listening when asked; closed by ``close()``.
public struct LoopbackSocket {
    public let descriptor: Int32
    public let port: Int

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    public init(listening: Bool) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && (!listening || listen(fd, 1) == 0)
                    && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else {
            Glibc.close(fd)
            throw Failure(description: "binding 127.0.0.1: errno \(errno)")
        }
        descriptor = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    public func close() { _ = Glibc.close(descriptor) }
}
