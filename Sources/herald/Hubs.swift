import ArgumentParser
import Foundation
import HeraldClient
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack

/// `herald hubs`: hubs and their shared access keys, through herald-auth's RPCs.
struct Hubs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage hubs (one per app) and their keys.",
        subcommands: [
            Add.self, List.self, Show.self, Delete.self, Keys.self, Key.self, Grant.self, Credentials.self, Limits.self,
        ])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Create a hub with NH's two default keys (DefaultListenSharedAccessSignature, DefaultFullSharedAccessSignature)."
        )
        @OptionGroup var stack: StackOptions
        @Argument(help: "Hub name: \(Names.hubNameRule)")
        var name: String
        @Option(help: "At most this many installations (0: no limit).")
        var maxInstallations: Int64 = 0

        func run() async throws {
            let hub = try await CLIAudit.record(stack, "hub.create", hub: name) {
                try await withService(.auth, stack) { client in
                    try await AuthServiceClient(client).createHub(
                        CreateHubRequest(name: name, maxInstallations: maxInstallations))
                }
            }
            print("hub \(hub.name) created; its connection strings: herald hubs keys \(hub.name)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the hubs.")
        @OptionGroup var stack: StackOptions

        func run() async throws {
            let hubs = try await withService(.auth, stack) { client in
                try await AuthServiceClient(client).listHubs(ListHubsRequest()).hubs
            }
            for hub in hubs {
                print("\(hub.name)\t\(hub.keys.count) key(s)\tcreated \(Self.date(hub.createdAtUnixMs))")
            }
        }

        static func date(_ millis: Int64) -> String {
            iso8601(unixMillis: millis, fractional: false)
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a hub and its keys' rights (no secrets).")
        @OptionGroup var stack: StackOptions
        @Argument var name: String

        func run() async throws {
            let (hub, pushes) = try await Limits.read(name, stack)
            print("hub \(hub.name)\tcreated \(List.date(hub.createdAtUnixMs))")
            for line in Limits.describe(hub, pushes) { print("  \(line)") }
            for key in hub.keys { print("  key \(key.name)\t\(key.hubRights.names.joined(separator: ","))") }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Delete a hub: its keys first (nothing can call it any more), then its push credentials, sends and devices."
        )
        @OptionGroup var stack: StackOptions
        @Argument(help: "The hub's name.")
        var name: String?
        @Option(
            help: """
                Finish a deletion that stopped after the hub's keys were deleted: its credentials, sends and \
                devices, by the id the failed deletion printed.
                """)
        var id: String?

        func validate() throws {
            guard (name == nil) != (id == nil) else {
                throw ValidationError("give the hub's name, or --id to finish a deletion that stopped half-way")
            }
        }

        func run() async throws {
            let deleted: HubAdministration.Deleted
            let what: String
            if let id {
                deleted = try await withEveryService(stack) { _, registration, _, dispatch in
                    try await HubAdministration.finishDelete(id: id, registration: registration, dispatch: dispatch)
                }
                what = "hub id \(id): credentials"
            } else {
                let name = name ?? ""
                let hub: Hub
                let known = try? await Hubs.identity(name, stack)
                (hub, deleted) = try await CLIAudit.record(
                    stack, "hub.delete", hub: known?.name ?? name, hubID: known?.id ?? ""
                ) {
                    try await withEveryService(stack) { auth, registration, _, dispatch in
                        try await HubAdministration.delete(
                            name: name, auth: auth, registration: registration, dispatch: dispatch)
                    }
                }
                what = "hub \(hub.name) deleted with its keys, credentials"
            }
            print(
                "\(what), \(deleted.devices) device(s) and "
                    + "\(deleted.sends) send(s), \(deleted.cancelledSends) of them scheduled and now cancelled")
        }
    }

    struct Limits: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show or change a hub's limits; options not given stay as they are (0: no limit).",
            discussion: """
                herald-auth keeps the installation limit and the request rate (the edge answers 429 with
                Retry-After beyond it); herald-dispatch keeps the push quotas (a send that would pass one
                is refused whole, 403 QuotaExceeded at the edge), the concurrency cap and the weight (the
                hub's share of each delivery claim against other hubs with pushes due).
                """)
        @OptionGroup var stack: StackOptions
        @Argument var name: String
        @Option(help: "At most this many installations; existing ones stay.")
        var maxInstallations: Int64?
        @Option(help: "API requests a second, on all edges together (each enforces its hub-rate-share).")
        var requestsPerSecond: Int64?
        @Option(help: "Requests at once above the rate (0: one second's worth).")
        var requestBurst: Int64?
        @Option(help: "Pushes (deliveries) a UTC day.")
        var pushesPerDay: Int64?
        @Option(help: "Pushes (deliveries) a UTC month.")
        var pushesPerMonth: Int64?
        @Option(help: "Provider requests in flight at once, per dispatch replica (0: half the sender at most).")
        var maxConcurrentPushes: Int64?
        @Option(help: "Share of each delivery claim against other busy hubs, 1 to 100 (0 or 1: an equal share).")
        var weight: Int64?

        func run() async throws {
            let changes = HubAdministration.Limits(
                maxInstallations: maxInstallations, requestsPerSecond: requestsPerSecond, requestBurst: requestBurst,
                pushesPerDay: pushesPerDay, pushesPerMonth: pushesPerMonth, maxConcurrentPushes: maxConcurrentPushes,
                weight: weight)
            let (hub, pushes) =
                changes.isEmpty
                ? try await Self.read(name, stack)
                : try await CLIAudit.record(
                    stack, "limits.set", hub: name, hubID: (try? await Hubs.identity(name, stack))?.id ?? "",
                    detail: changes.auditDetail
                ) { try await Self.read(name, stack, changing: changes) }
            print("hub \(hub.name):")
            for line in Self.describe(hub, pushes) { print("  \(line)") }
        }

        /// Hub `name` and its push limits, with `changes` made first.
        static func read(
            _ name: String, _ stack: StackOptions,
            changing changes: HubAdministration.Limits = HubAdministration.Limits()
        ) async throws -> (hub: Hub, pushes: HubPushLimits) {
            try await withService(.auth, stack) { auth in
                try await withService(.dispatch, stack) { dispatch in
                    try await HubAdministration.limits(
                        name: name, changing: changes, auth: AuthServiceClient(auth),
                        dispatch: DispatchServiceClient(dispatch))
                }
            }
        }

        static func describe(_ hub: Hub, _ pushes: HubPushLimits) -> [String] {
            func limit(_ value: Int64) -> String { value == 0 ? "unlimited" : String(value) }
            return [
                "max installations \(limit(hub.maxInstallations))",
                "requests per second \(limit(hub.requestsPerSecond)), burst "
                    + (hub.requestBurst == 0 ? "one second's worth" : String(hub.requestBurst)),
                "pushes per day \(limit(pushes.pushesPerDay)) (\(pushes.pushesToday) today), "
                    + "per month \(limit(pushes.pushesPerMonth)) (\(pushes.pushesThisMonth) this month)",
                "concurrent pushes per dispatch replica "
                    + (pushes.maxConcurrentPushes == 0 ? "default" : String(pushes.maxConcurrentPushes)),
                "weight " + (pushes.weight <= 1 ? "1 (default)" : String(pushes.weight)),
            ]
        }
    }

    struct Credentials: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "A hub's push credentials (the hub default's are herald-dispatch's own settings).",
            subcommands: [Set.self, Show.self, Delete.self])

        struct Set: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Set one platform's credentials; checked now, never shown again.",
                discussion: """
                    Settings are NAME=VALUE, or NAME=@FILE to read the value from a file:
                      apns:    key=@AuthKey.p8 key-id=… team-id=… topic=<bundle id> [environment=production|sandbox] [url=…]
                               or certificate=@cert.p12 [certificate-password=@password.txt] [topic=…] [environment=…]
                               (a .p12, or PEM with the certificate and its key; the topic defaults to the certificate's)
                      fcm:     service-account=@service-account.json [url=…] [token-url=…]
                      wns:     client-id=… client-secret=@secret.txt [token-url=…]
                      browser: vapid-key=@vapid.pem subject=mailto:ops@example.com
                    """)
            @OptionGroup var stack: StackOptions
            @Argument var hub: String
            @Argument(help: "apns, fcm, wns or browser")
            var platform: String
            @Argument(help: "NAME=VALUE or NAME=@FILE")
            var settings: [String]

            func run() async throws {
                let platform = try Hubs.platform(self.platform)
                var parsed: [String: String] = [:]
                for setting in settings {
                    guard let equals = setting.firstIndex(of: "=") else {
                        throw ValidationError("\(setting): settings are NAME=VALUE or NAME=@FILE")
                    }
                    let name = String(setting[..<equals])
                    var value = String(setting[setting.index(after: equals)...])
                    if value.hasPrefix("@") {
                        guard let data = FileManager.default.contents(atPath: String(value.dropFirst())) else {
                            throw ValidationError("\(name): cannot read \(value.dropFirst())")
                        }
                        // A certificate is a binary .p12 (or PEM): the setting carries the file in base64.
                        value =
                            name == "certificate"
                            ? data.base64EncodedString()
                            : String(decoding: data, as: UTF8.self).trimmingCharacters(
                                in: name == "certificate-password" ? .newlines : [])
                    }
                    parsed[name] = value
                }
                let hub = try await Hubs.identity(self.hub, stack)
                let request: SetHubCredentialsRequest
                do {
                    request = try SetHubCredentialsRequest(hub: hub.id, platform: platform, settings: parsed)
                } catch let error as ServiceError {
                    throw ValidationError(error.message)
                }
                let answer = try await CLIAudit.record(
                    stack, "credentials.set", hub: hub.name, hubID: hub.id, target: platform.name
                ) {
                    try await withService(.dispatch, stack) { client in
                        try await DispatchServiceClient(client).setHubCredentials(request)
                    }
                }
                Show.print(answer, hub: hub.name)
            }
        }

        struct Show: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "What delivers each platform of a hub (no secrets).")
            @OptionGroup var stack: StackOptions
            @Argument var hub: String

            func run() async throws {
                let hub = try await Hubs.identity(self.hub, stack)
                let answer = try await withService(.dispatch, stack) { client in
                    try await DispatchServiceClient(client).getHubCredentials(GetHubCredentialsRequest(hub: hub.id))
                }
                Self.print(answer, hub: hub.name)
            }

            static func print(_ answer: HubCredentialsResponse, hub: String) {
                Swift.print("hub \(hub)")
                for platform in answer.platforms {
                    let ends =
                        platform.expiresAtUnixMs > 0
                        ? "\tends " + iso8601(unixMillis: platform.expiresAtUnixMs, fractional: false)
                        : ""
                    Swift.print(
                        "  \(platform.platform.name)\t\(platform.source.word)\(platform.summary.isEmpty ? "" : "\t" + platform.summary)\(ends)"
                    )
                }
            }
        }

        struct Delete: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Remove one platform's credentials of a hub.")
            @OptionGroup var stack: StackOptions
            @Argument var hub: String
            @Argument var platform: String

            func run() async throws {
                let platform = try Hubs.platform(self.platform)
                let hub = try await Hubs.identity(self.hub, stack)
                let answer = try await CLIAudit.record(
                    stack, "credentials.delete", hub: hub.name, hubID: hub.id, target: platform.name
                ) {
                    try await withService(.dispatch, stack) { client in
                        try await DispatchServiceClient(client).deleteHubCredentials(
                            DeleteHubCredentialsRequest(hub: hub.id, platform: platform))
                    }
                }
                Show.print(answer, hub: hub.name)
            }
        }
    }

    /// The hub `name` names (regardless of case): its stored name, and the id registration and
    /// dispatch know it by.
    static func identity(_ name: String, _ stack: StackOptions) async throws -> (name: String, id: String) {
        let hub = try await withService(.auth, stack) { client in
            try await AuthServiceClient(client).getHub(GetHubRequest(name: name))
        }
        return (hub.name, hub.id)
    }

    static func platform(_ name: String) throws -> Platform {
        guard let platform = SetHubCredentialsRequest.platform(named: name) else {
            throw ValidationError("platform must be apns, fcm, wns or browser")
        }
        return platform
    }

    struct Keys: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a hub's keys as Notification Hubs connection strings (they hold secrets).")
        @OptionGroup var stack: StackOptions
        @Option(help: "The edge's address as clients reach it, written into the connection strings.")
        var endpoint = "sb://localhost:8080/"
        @Flag(help: "Use the secondary secret.")
        var secondary = false
        @Argument var name: String

        func run() async throws {
            let keys = try await withService(.auth, stack) { client in
                try await AuthServiceClient(client).listHubKeys(ListHubKeysRequest(hub: name)).keys
            }
            for key in keys {
                print("\(key.name) (\(key.hubRights.names.joined(separator: ",")))")
                print(
                    "  " + HubAdministration.connectionString(endpoint: endpoint, key: key, secondary: secondary))
            }
        }
    }

    struct Key: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create, change, rotate or revoke one key of a hub.",
            subcommands: [Set.self, Rotate.self, Revoke.self])

        struct Set: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Create a key, or change an existing key's rights.")
            @OptionGroup var stack: StackOptions
            @Argument var hub: String
            @Argument var name: String
            @Argument(help: "Rights: any of Listen, Send, Manage.")
            var rights: [String]

            func run() async throws {
                let identity = try await Hubs.identity(hub, stack)
                let key = try await CLIAudit.record(
                    stack, "key.set", hub: identity.name, hubID: identity.id, target: name,
                    detail: "rights: \(rights.joined(separator: ", "))"
                ) {
                    try await withService(.auth, stack) { client in
                        var request = SetHubKeyRequest(hub: identity.name, name: name)
                        request.hubRights = try HubRights(names: rights)
                        return try await AuthServiceClient(client).setHubKey(request)
                    }
                }
                print("key \(key.name) of \(hub): \(key.hubRights.names.joined(separator: ","))")
            }
        }

        struct Rotate: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Replace a key's primary or secondary secret; tokens signed with the old one stop working.")
            @OptionGroup var stack: StackOptions
            @Argument var hub: String
            @Argument var name: String
            @Argument(help: "primary or secondary")
            var which: String

            func run() async throws {
                let identity = try await Hubs.identity(hub, stack)
                _ = try await CLIAudit.record(
                    stack, "key.rotate", hub: identity.name, hubID: identity.id, target: name, detail: which
                ) {
                    try await withService(.auth, stack) { client in
                        try await AuthServiceClient(client).rotateHubKey(
                            RotateHubKeyRequest(hub: identity.name, name: name, which: which))
                    }
                }
                print("\(which) secret of \(name) on \(hub) replaced; see it with: herald hubs keys \(hub)")
            }
        }

        struct Revoke: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Delete a key; every token it signed stops working.")
            @OptionGroup var stack: StackOptions
            @Argument var hub: String
            @Argument var name: String

            func run() async throws {
                let identity = try await Hubs.identity(hub, stack)
                _ = try await CLIAudit.record(
                    stack, "key.revoke", hub: identity.name, hubID: identity.id, target: name
                ) {
                    try await withService(.auth, stack) { client in
                        try await AuthServiceClient(client).revokeHubKey(
                            RevokeHubKeyRequest(hub: identity.name, name: name))
                    }
                }
                print("key \(name) of \(hub) revoked")
            }
        }
    }

    struct Grant: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Set a Herald user's rights on a hub (none: only their own devices). E.g. herald hubs grant default alice Send"
        )
        @OptionGroup var stack: StackOptions
        @Argument var hub: String
        @Argument var user: String
        @Argument(help: "Any of Listen, Send, Manage; none removes the grant.")
        var rights: [String] = []

        func run() async throws {
            let identity = try await Hubs.identity(hub, stack)
            let granted = try await CLIAudit.record(
                stack, "grant.set", hub: identity.name, hubID: identity.id, target: AuditChain.pseudonym(user: user),
                detail: "rights: \(rights.isEmpty ? "none" : rights.joined(separator: ", "))"
            ) {
                try await withService(.auth, stack) { client in
                    var request = GrantHubRightsRequest(hub: identity.name, user: user)
                    request.hubRights = try HubRights(names: rights)
                    return try await AuthServiceClient(client).grantHubRights(request).hubRights
                }
            }
            let names = granted.names
            print("\(user) on \(hub): \(names.isEmpty ? "no rights" : names.joined(separator: ","))")
        }
    }
}
