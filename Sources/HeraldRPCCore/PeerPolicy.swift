import Foundation
import HeraldModel
public import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// Who may call a service over its Unix sockets, checked with the kernel's SO_PEERCRED (the
/// connecting process's real UID and GID), beside the sockets' 0660 mode and the folder's 0750.
///
/// `allow-uids` (default: the service's own UID) and `allow-gids` (default: none) are
/// comma-separated numbers; a peer is allowed when its UID or its GID is listed.
public struct PeerPolicy: Sendable {
    public var uids: Set<UInt32>
    public var gids: Set<UInt32>

    public init(uids: Set<UInt32>, gids: Set<UInt32> = []) {
        self.uids = uids
        self.gids = gids
    }

    public init(reader: ConfigReader) throws {
        func numbers(_ key: String, _ fallback: String) throws -> Set<UInt32> {
            let text = reader.string(key, default: fallback)
            var values: Set<UInt32> = []
            for part in text.split(separator: ",") {
                guard let value = UInt32(part.trimmingCharacters(in: .whitespaces)) else {
                    throw ConfigError("\(key) must be comma-separated numeric ids, e.g. 1000,1001")
                }
                values.insert(value)
            }
            return values
        }
        uids = try numbers("allow-uids", "\(getuid())")
        gids = try numbers("allow-gids", "")
    }

    public static let keys: Set<String> = ["allow-uids", "allow-gids"]

    public func allows(uid: UInt32, gid: UInt32) -> Bool {
        uids.contains(uid) || gids.contains(gid)
    }

    /// nil when the peer of `channel` may call; otherwise why not, for the caller and the log.
    /// Must run on the channel's event loop (in a channel initializer).
    public func refusal(for channel: any Channel) -> EventLoopFuture<String?> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeSucceededFuture("the peer's credentials cannot be read")
        }
        let future: EventLoopFuture<PeerCredentials> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
        return future.map { credentials in
            allows(uid: credentials.uid, gid: credentials.gid)
                ? nil : "peer uid \(credentials.uid) gid \(credentials.gid) is not allowed to call this service"
        }.recover { _ in "the peer's credentials cannot be read" }
    }
}

/// The kernel's `struct ucred` (pid, uid, gid), laid out the same: Swift's Glibc module does not
/// export it (it sits behind `_GNU_SOURCE`).
struct PeerCredentials: Sendable {
    var pid: Int32
    var uid: UInt32
    var gid: UInt32
}
