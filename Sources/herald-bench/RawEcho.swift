import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The floor of the RPC benchmark: a blocking Unix-socket echo, one thread per connection, no
/// framing, no codec. Nothing Herald does over a socket can be cheaper than this.
enum RawEcho {
    /// Serves forever on `path` (in a background thread).
    static func serve(path: String) throws {
        unlink(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var address = socketAddress(path)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0, listen(fd, 64) == 0 else { throw POSIXError(.EADDRINUSE) }
        Thread.detachNewThread {
            while true {
                let connection = accept(fd, nil, nil)
                guard connection >= 0 else { continue }
                Thread.detachNewThread {
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    while true {
                        let n = buffer.withUnsafeMutableBytes { read(connection, $0.baseAddress, $0.count) }
                        if n <= 0 { break }
                        _ = buffer.withUnsafeBytes { write(connection, $0.baseAddress, n) }
                    }
                    close(connection)
                }
            }
        }
    }

    /// A connected client socket.
    static func connect(path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = socketAddress(path)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
        return fd
    }

    /// Sends `request` and reads the same number of bytes back.
    static func roundTrip(_ fd: Int32, _ request: [UInt8], _ reply: inout [UInt8]) {
        _ = request.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        var got = 0
        while got < request.count {
            let n = reply.withUnsafeMutableBytes { raw in
                raw.baseAddress.map { read(fd, $0 + got, request.count - got) } ?? 0
            }
            if n <= 0 { return }
            got += n
        }
    }

    private static func socketAddress(_ path: String) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in path.utf8.enumerated() { raw[i] = byte }
        }
        return address
    }
}
