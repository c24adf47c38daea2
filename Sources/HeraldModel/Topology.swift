/// Herald's processes and who calls whom: the one place their names, start order and peers are
/// written. A service's name is its executable (`herald-<name>`), its sockets (`<name>.sock`,
/// `<name>.grpc.sock`), its database (`<name>.sqlite`) and the `--<name>-socket` key of its callers.
public enum ServiceName: String, CaseIterable, Sendable, CustomStringConvertible {
    // In start order: each after the services it calls.
    case auth, registration, payload, dispatch, edge

    /// The services this one calls.
    public var peers: [ServiceName] {
        switch self {
        case .auth, .registration, .payload: []
        case .dispatch: [.registration]
        case .edge: [.auth, .registration, .payload, .dispatch]
        }
    }

    /// Whether it serves RPCs (the edge serves HTTP only).
    public var servesRPC: Bool { self != .edge }

    /// The services that serve RPCs, in start order.
    public static let rpcServices = allCases.filter(\.servesRPC)

    public var description: String { rawValue }
}

/// How herald-auth decides who a caller is.
public enum AuthMode: String, CaseIterable, Sendable {
    /// Real accounts with scrypt-hashed passwords, managed with `herald users`.
    case accounts
    /// The tutorial's rule: any user whose password equals the user name. For running the tutorial
    /// apps unchanged; never for production.
    case tutorial
}

/// Which flow the edge's `POST api/notifications` (no query) runs, as the tutorial's backend was
/// configured.
public enum EdgeProfile: String, CaseIterable, Sendable {
    /// Secure push: store "Secure confirmation." and push only its id.
    case secure
    /// Rich push: store an image and push its id with a message.
    case rich
}
