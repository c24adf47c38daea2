import Foundation
public import HeraldProto

/// Notification Hubs access rights, as a bit set (how auth stores them), shown with NH's names.
/// The rights of a key or of a user on a hub cross services as `repeated HubRight` (auth.proto),
/// beside their names for peers of the releases before (``HubRightsCarrier``), and become this set
/// where they arrive: every check is on it.
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

    /// The rights among `names` (an older peer's `legacy_rights`), a name this build does not
    /// know left out.
    public init(granted names: [String]) {
        self = HubRights(names.compactMap { try? HubRights(names: [$0]) })
    }

    /// The rights another service answered; one this build does not know (a newer peer's)
    /// grants nothing here. Manage brings Listen and Send.
    public init(_ rights: [HubRight]) {
        var set: HubRights = []
        for right in rights {
            switch right {
            case .listen: set.insert(.listen)
            case .send: set.insert(.send)
            case .manage: set.formUnion(.full)
            case .unspecified, .unrecognized: break
            }
        }
        self = set
    }

    /// The rights a caller asks to give: INVALID_ARGUMENT for one that is not set or not known
    /// here, rather than a key or grant with less than was asked.
    public init(requested rights: [HubRight]) throws {
        for right in rights {
            switch right {
            case .listen, .send, .manage: continue
            case .unspecified, .unrecognized:
                throw ServiceError.invalidArgument("unknown right \(right): use Listen, Send or Manage")
            }
        }
        self.init(rights)
    }

    /// As auth.proto carries them, in the order of ``names``.
    public var proto: [HubRight] {
        var rights: [HubRight] = []
        if contains(.listen) { rights.append(.listen) }
        if contains(.manage) { rights.append(.manage) }
        if contains(.send) { rights.append(.send) }
        return rights
    }

    public var names: [String] {
        var names: [String] = []
        if contains(.listen) { names.append("Listen") }
        if contains(.manage) { names.append("Manage") }
        if contains(.send) { names.append("Send") }
        return names
    }
}

/// A message of auth.proto that carries rights: typed in `rights`, and as names in
/// `legacy_rights` for peers of the releases before the enum, so a rolling upgrade (services
/// deployed one at a time) never answers a right as missing.
public protocol HubRightsCarrier {
    var rights: [HubRight] { get set }
    var legacyRights: [String] { get set }
}

extension HubRightsCarrier {
    /// Read: `rights`, or an older peer's names when it sent no `rights`. Written: both.
    public var hubRights: HubRights {
        get { rights.isEmpty ? HubRights(granted: legacyRights) : HubRights(rights) }
        set {
            rights = newValue.proto
            legacyRights = newValue.names
        }
    }

    /// The rights a request asks to give (``HubRights/init(requested:)``); an older caller's
    /// names parsed as they always were. INVALID_ARGUMENT for a right not known here.
    public func requestedRights() throws -> HubRights {
        rights.isEmpty ? try HubRights(names: legacyRights) : try HubRights(requested: rights)
    }
}

extension AuthenticateResponse: HubRightsCarrier {}
extension AuthorizeSasResponse: HubRightsCarrier {}
extension HubKey: HubRightsCarrier {}
extension SetHubKeyRequest: HubRightsCarrier {}
extension GrantHubRightsRequest: HubRightsCarrier {}
extension GrantHubRightsResponse: HubRightsCarrier {}
