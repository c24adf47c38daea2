import Foundation

/// Notification Hubs access rights, as a bit set (how auth stores them), shown with NH's names.
/// The rights of a key or of a user on a hub cross services as those names (`repeated string
/// rights` in auth.proto) and are typed here where they arrive: every check is on this set.
public struct HubRights: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let listen = HubRights(rawValue: 1)
    public static let send = HubRights(rawValue: 2)
    public static let manage = HubRights(rawValue: 4)
    /// What NH's `DefaultFullSharedAccessSignature` holds.
    public static let full: HubRights = [.listen, .send, .manage]

    /// Parses NH's names, case-insensitively. Manage brings Listen and Send, as in NH.
    /// INVALID_ARGUMENT for a name that is none of them.
    public init(names: [String]) throws {
        var rights: HubRights = []
        for name in names {
            switch name.lowercased() {
            case "listen": rights.insert(.listen)
            case "send": rights.insert(.send)
            case "manage": rights.formUnion(.full)
            default: throw ServiceError.invalidArgument("unknown right \(name): use Listen, Send or Manage")
            }
        }
        self = rights
    }

    /// The rights among `names` (as another service answers them), a name this build does not
    /// know left out: a newer peer's right grants nothing here.
    public init(granted names: [String]) {
        self = HubRights(names.compactMap { try? HubRights(names: [$0]) })
    }

    public var names: [String] {
        var names: [String] = []
        if contains(.listen) { names.append("Listen") }
        if contains(.manage) { names.append("Manage") }
        if contains(.send) { names.append("Send") }
        return names
    }
}
