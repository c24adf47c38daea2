import HeraldModel
public import HeraldProto

/// Whose sends a read of one send may see: every read of a send (its outcome, its deliveries, its
/// cancellation) takes one, with no default, and the outbox checks it where it reads the row
/// (a read's scope is checked where the data is read). A request that names neither a requester
/// nor a hub is no read at all: otherwise a caller that forgot to name them would read wider than
/// its key allows.
public enum SendScope: Sendable, Equatable {
    /// Sends this principal made (a signed-in user, stored as `sender`), on `hub` too when it is
    /// not empty.
    case sender(String, hub: String)
    /// Sends on this hub, by anyone (a hub's keys; the console for one hub).
    case hub(String)
    /// Sends on any of these hubs (an operator who manages them, finding a send by its id).
    case hubs(Set<String>)
    /// Any send (an operator over the service's socket, `READ_SCOPE_ALL`).
    case everyHub

    /// The most hubs a request may name (operators create hubs; a console search names those its
    /// operator manages).
    public static let maxHubs = 1000

    /// The scope a request asks for: its `requester`, else its `hub`, else its `hubs`, else
    /// `READ_SCOPE_ALL`; PERMISSION_DENIED for a request that names none of them.
    public init(requester: String, hub: String, hubs: [String] = [], scope: ReadScope) throws {
        if !requester.isEmpty {
            self = .sender(requester, hub: hub)
        } else if !hub.isEmpty {
            self = .hub(hub)
        } else if !hubs.isEmpty {
            guard hubs.count <= Self.maxHubs, !hubs.contains(where: \.isEmpty) else {
                throw ServiceError.invalidArgument("hubs names 1 to \(Self.maxHubs) hub ids, none empty")
            }
            self = .hubs(Set(hubs))
        } else if scope == .all {
            self = .everyHub
        } else {
            throw ServiceError(
                .permissionDenied,
                "a read of one send names its requester or its hub; an operator's read of any hub needs READ_SCOPE_ALL")
        }
    }

    /// Whether a send `sender` made on `hub` is in scope.
    func admits(sender: String, hub: String) -> Bool {
        switch self {
        case .sender(let requester, let only): sender == requester && (only.isEmpty || hub == only)
        case .hub(let only): hub == only
        case .hubs(let any): any.contains(hub)
        case .everyHub: true
        }
    }
}
