import Foundation
public import HeraldModel
public import HeraldProto

/// A Notification Hubs installation: NH's JSON in and out, validated with Herald's rules.
///
/// Lenient where the SDKs differ (docs/notification-hubs.md, "Installations"): platform names in any case; `userId` or `userID`;
/// a browser `pushChannel` as an object `{"endpoint","p256dh","auth"}` (JS) or that object
/// JSON-encoded in a string (Java); read-only fields (`pushChannelExpired`, `expirationTime`,
/// `lastUpdate`) ignored on write. Strict where NH lets bad data in: tags that break the tag alphabet
/// (NH accepted `"a,b"` and then never matched it) are refused, and so are legacy platforms.
public struct Installation: Sendable, Equatable {
    public struct Template: Sendable, Equatable {
        public var body: String
        public var headers: [String: String]
        public var expiry: String?
        public var tags: [String]

        public init(body: String, headers: [String: String] = [:], expiry: String? = nil, tags: [String] = []) {
            self.body = body
            self.headers = headers
            self.expiry = expiry
            self.tags = tags
        }

        /// What a template must be to be stored, checked on the whole installation a PUT or a
        /// PATCH would leave (``Installation/validate(hosts:)``), as NH's validator does, rather
        /// than at every send: a body and expressions that parse, and valid tags. A patch of one
        /// part (`/templates/{name}/body`) once skipped this and stored a template that broke
        /// every read and send of the hub.
        package func validate(name: String) throws {
            guard !body.isEmpty else { throw ServiceError.invalidArgument("template \(name) needs a body") }
            do {
                _ = try PushTemplate(body)
            } catch {
                throw ServiceError.invalidArgument("template \(name) body: \(error.message)")
            }
            for (field, value) in headers.map({ ("header \($0.key)", $0.value) }) + [("expiry", expiry ?? "")] {
                do {
                    _ = try PushTemplate.renderValue(value, PushTemplate.Properties([]))
                } catch {
                    throw ServiceError.invalidArgument("template \(name) \(field): \(error.message)")
                }
            }
            // A header written as a plain value is checked now, as dispatch would read it; one
            // computed from the send's properties is checked at each send, where a template that
            // cannot be rendered leaves its own devices out of that send and nothing else.
            for (key, value) in headers where !Self.isExpression(value) {
                guard NHHeaders.accepts(key.lowercased(), value) else {
                    throw ServiceError.invalidArgument(
                        "template \(name) header \(key): \(value.prefix(40)) is out of range (\(NHHeaders.acceptedValues))"
                    )
                }
            }
            _ = try RegistrationRules.validateTags(tags)
        }

        /// Whether a header value is an expression (NH's rule: its first character is `$ . % # {`),
        /// whose value depends on the send's properties.
        package static func isExpression(_ value: String) -> Bool {
            value.first.map { "$.%#{".contains($0) } ?? false
        }

        /// What a template send needs of it, as JSON: `{"body","expiry","headers"}` (sorted keys,
        /// so equal templates are equal text and render once per send).
        public var wireJSON: String {
            var out = "{\"body\":" + jsonStringLiteral(body)
            if let expiry { out += ",\"expiry\":" + jsonStringLiteral(expiry) }
            out += ",\"headers\":{"
            out += headers.sorted { $0.key < $1.key }.map {
                jsonStringLiteral($0.key) + ":" + jsonStringLiteral($0.value)
            }
            .joined(separator: ",")
            return out + "}}"
        }

        /// The template as StreamAudience hands it to a send, from the JSON its row keeps
        /// (``wireJSON``, which a template registration's row keeps too); `name` left empty.
        /// A row that is not such JSON gives an empty body, which the send refuses for that
        /// template's devices alone: one bad row must not fail a hub's whole broadcast.
        public static func message(wireJSON json: String) -> InstallationTemplate {
            guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any],
                let body = object["body"] as? String
            else { return InstallationTemplate() }
            let headers = (object["headers"] as? [String: String] ?? [:]).sorted { $0.key < $1.key }
            return InstallationTemplate(
                body: body, headers: headers.map { HubRegistrationField(name: $0.key, value: $0.value) },
                expiry: object["expiry"] as? String ?? "")
        }
    }

    public var installationID: String
    public var userID: String?
    public var platform: Platform
    /// Herald's handle: the APNs token, FCM token, WNS channel URI, or for browsers the
    /// subscription JSON `{"endpoint","keys":{"p256dh","auth"}}`.
    public var pushChannel: String
    public var tags: [String]
    public var pushVariables: [String: String]
    public var templates: [String: Template]
    /// Read-only on the wire: set by push-service feedback, cleared when the channel changes.
    public var pushChannelExpired = false
    /// Read-only on the wire; Unix ms.
    public var lastUpdate: Int64 = 0

    public init(
        installationID: String, userID: String? = nil, platform: Platform, pushChannel: String, tags: [String] = [],
        pushVariables: [String: String] = [:], templates: [String: Template] = [:]
    ) {
        self.installationID = installationID
        self.userID = userID
        self.platform = platform
        self.pushChannel = pushChannel
        self.tags = tags
        self.pushVariables = pushVariables
        self.templates = templates
    }

    /// NH's default: installations never expire.
    public static let expirationTime = "9999-12-31T23:59:59.9999999Z"
    public static let maxIDLength = 256

    // MARK: parsing

    /// Parses and validates a PUT body for `id` (the path segment; the body's `installationId` must match).
    public static func parse(_ data: [UInt8], id: String, hosts: RegistrationRules.PushHosts) throws -> Installation {
        try parse(try object(data), id: id, hosts: hosts)
    }

    /// Reads a PUT body for `id` as herald-edge does: NH's JSON into an installation, every field
    /// checked except what only herald-registration knows (the allowed push hosts, and the
    /// templates' expressions, which it checks with them: ``validate(hosts:)``).
    public static func read(_ data: [UInt8], id: String) throws -> Installation {
        try parse(try object(data), id: id, hosts: nil)
    }

    private static func object(_ data: [UInt8]) throws -> [String: Any] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(data)) as? [String: Any] else {
            throw ServiceError.invalidArgument("the body must be an installation as a JSON object")
        }
        return object
    }

    /// `hosts` nil: a stored installation, validated as a whole when it was written; read back
    /// without checking its handle or its templates again, so that a row no PUT would take today
    /// still reads, lists and exports.
    package static func parse(_ object: [String: Any], id: String, hosts: RegistrationRules.PushHosts?) throws
        -> Installation
    {
        try validateID(id)
        guard let bodyID = object["installationId"] as? String else {
            throw ServiceError.invalidArgument("installationId is required")
        }
        guard bodyID == id else {
            throw ServiceError.invalidArgument("installationId \(bodyID) differs from the id in the path, \(id)")
        }
        guard let platformName = object["platform"] as? String else {
            throw ServiceError.invalidArgument("platform is required")
        }
        let platform = try Self.platform(platformName)
        guard let channel = object["pushChannel"] else { throw ServiceError.invalidArgument("pushChannel is required") }
        var installation = Installation(
            installationID: id, userID: nil, platform: platform,
            pushChannel: try Self.pushChannel(channel, platform: platform),
            tags: [], pushVariables: [:], templates: [:])
        installation.userID = try Self.userID(object["userId"] ?? object["userID"])
        installation.tags = try Self.tags(object["tags"])
        installation.pushVariables = try Self.stringMap(object["pushVariables"], "pushVariables")
        installation.templates = try Self.templates(object["templates"])
        if let hosts { try installation.validate(hosts: hosts) }
        return installation
    }

    /// The stored form read back (validated when it was written).
    public static func stored(_ data: [UInt8]) throws -> Installation {
        guard let object = try JSONSerialization.jsonObject(with: Data(data)) as? [String: Any],
            let id = object["installationId"] as? String
        else { throw ServiceError(.internal, "a stored installation is not valid JSON") }
        return try parse(object, id: id, hosts: nil)
    }

    public func validate(hosts: RegistrationRules.PushHosts) throws {
        do {
            try RegistrationRules.validateHandle(pushChannel, platform: platform, hosts: hosts)
        } catch let error as ServiceError {
            throw ServiceError.invalidArgument("pushChannel: \(error.message)")
        }
        _ = try RegistrationRules.validateTags(tags)
        for (name, template) in templates { try template.validate(name: name) }
    }

    /// "Entity segments can contain only letters, numbers, periods (.), hyphens (-), and underscores (_)".
    public static func validateID(_ id: String) throws {
        guard isEntityID(id) else {
            throw ServiceError.invalidArgument(
                "installationId must be 1 to \(maxIDLength) letters, digits, periods (.), hyphens (-) and underscores (_)"
            )
        }
    }

    /// NH's rule for an id in a path (installations, registrations): 1 to 256 letters, digits,
    /// periods, hyphens and underscores.
    package static func isEntityID(_ id: String) -> Bool {
        (1...maxIDLength).contains(id.utf8.count)
            && id.utf8.allSatisfy({
                $0.isLetterOrDigit || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
            })
    }

    /// NH's platform names, in any case. Legacy FCM is refused with the way forward.
    public static func platform(_ name: String) throws -> Platform {
        if let platform = NHPlatformNames.installation(name) { return platform }
        switch name.lowercased() {
        case "gcm", "fcm":
            throw ServiceError.invalidArgument(
                "platform \(name) is FCM's legacy API, retired by Google in 2024: use fcmv1 (the pushChannel stays the same FCM token)"
            )
        case "mpns", "adm", "baidu", "xiaomi":
            throw ServiceError.invalidArgument(
                "platform \(name) is not supported by Herald: use apns, fcmv1, wns or browser")
        default:
            throw ServiceError.invalidArgument("platform must be apns, fcmv1, wns or browser")
        }
    }

    /// NH's names on the wire.
    public static func platformName(_ platform: Platform) -> String {
        NHPlatformNames.of(platform)?.installation ?? "unknown"
    }

    package static func pushChannel(_ value: Any, platform: Platform) throws -> String {
        if platform == .browser {
            var object = value as? [String: Any]
            if object == nil, let text = value as? String {
                object = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
            }
            guard let object else {
                throw ServiceError.invalidArgument(
                    "pushChannel of a browser installation is {\"endpoint\",\"p256dh\",\"auth\"}")
            }
            let keys = object["keys"] as? [String: Any]
            guard let endpoint = object["endpoint"] as? String,
                let p256dh = (object["p256dh"] ?? keys?["p256dh"]) as? String,
                let auth = (object["auth"] ?? keys?["auth"]) as? String
            else {
                throw ServiceError.invalidArgument(
                    "pushChannel of a browser installation needs endpoint, p256dh and auth")
            }
            return try canonicalJSON(["endpoint": endpoint, "keys": ["p256dh": p256dh, "auth": auth]])
        }
        guard let text = value as? String, !text.isEmpty else {
            throw ServiceError.invalidArgument("pushChannel must be a string")
        }
        return text
    }

    package static func userID(_ value: Any?) throws -> String? {
        guard let value, !(value is NSNull) else { return nil }
        guard let text = value as? String else { throw ServiceError.invalidArgument("userId must be a string") }
        if text.isEmpty { return nil }
        guard text.utf8.count <= 256,
            text.utf8.allSatisfy({ $0.isLetterOrDigit || Array("-_@#.:=".utf8).contains($0) })
        else {
            throw ServiceError.invalidArgument("userId must be up to 256 characters of A-Z a-z 0-9 - _ @ # . : =")
        }
        return text
    }

    package static func tags(_ value: Any?) throws -> [String] {
        try RegistrationRules.validateTags(try tagStrings(value))
    }

    /// `tags` read as an array of strings (none when absent or null), not yet validated as tags.
    private static func tagStrings(_ value: Any?) throws -> [String] {
        guard let value, !(value is NSNull) else { return [] }
        guard let tags = value as? [Any] else { throw ServiceError.invalidArgument("tags must be an array of strings") }
        return try tags.map { tag in
            guard let text = tag as? String else {
                throw ServiceError.invalidArgument("tags must be an array of strings")
            }
            return text
        }
    }

    package static func stringMap(_ value: Any?, _ field: String) throws -> [String: String] {
        guard let value, !(value is NSNull) else { return [:] }
        guard let object = value as? [String: Any] else {
            throw ServiceError.invalidArgument("\(field) must be an object of strings")
        }
        return try object.mapValues { value in
            guard let text = value as? String else {
                throw ServiceError.invalidArgument("\(field) must be an object of strings")
            }
            return text
        }
    }

    package static func templates(_ value: Any?) throws -> [String: Template] {
        guard let value, !(value is NSNull) else { return [:] }
        guard let object = value as? [String: Any] else {
            throw ServiceError.invalidArgument("templates must be an object")
        }
        var templates: [String: Template] = [:]
        for (name, value) in object { templates[name] = try template(name: name, value) }
        return templates
    }

    package static func template(name: String, _ value: Any) throws -> Template {
        try checkTemplateName(name)
        guard let object = jsonValue(value) as? [String: Any] else {
            throw ServiceError.invalidArgument("template \(name) must be an object with a body")
        }
        guard let body = object["body"] as? String else {
            throw ServiceError.invalidArgument("template \(name) needs a body string")
        }
        return try template(
            name: name, body: body, headers: try stringMap(object["headers"], "template \(name) headers"),
            expiry: object["expiry"] as? String, tags: try tagStrings(object["tags"]))
    }

    /// A template from its parts, however they came (NH's JSON, a typed request): its name must be
    /// a tag, and NH adds that name to its tags.
    package static func template(name: String, body: String, headers: [String: String], expiry: String?, tags: [String])
        throws -> Template
    {
        try checkTemplateName(name)
        var tags = try RegistrationRules.validateTags(tags)
        if !tags.contains(name) { tags.append(name) }
        return Template(body: body, headers: headers, expiry: expiry, tags: tags)
    }

    package static func checkTemplateName(_ name: String) throws {
        guard Names.isValidTag(name) else {
            throw ServiceError.invalidArgument(
                "template name \(name) must be a valid tag (it becomes one): A-Z a-z 0-9 _ @ # . : -")
        }
    }

    /// A JSON value, or a string holding one (the SDKs send every patch value as a string).
    package static func jsonValue(_ value: Any) -> Any {
        if let text = value as? String, let first = text.first, first == "{" || first == "[",
            let parsed = try? JSONSerialization.jsonObject(with: Data(text.utf8))
        {
            return parsed
        }
        return value
    }

    // MARK: JSON out

    /// NH's GET body, fields in the order the service writes them. Written by hand with
    /// ``jsonStringLiteral`` rather than JSONSerialization, whose sorted-keys writer (ICU collation,
    /// dynamic casts) was most of a PATCH's cost; the output is the same JSON, keys in a fixed order.
    public func json() throws -> [UInt8] {
        var out = "{\"installationId\":" + jsonStringLiteral(installationID)
        if let userID { out += ",\"userId\":" + jsonStringLiteral(userID) }
        out += ",\"platform\":" + jsonStringLiteral(Self.platformName(platform))
        if platform == .browser,
            let subscription = (try? JSONSerialization.jsonObject(with: Data(pushChannel.utf8))) as? [String: Any],
            let endpoint = subscription["endpoint"] as? String, let keys = subscription["keys"] as? [String: Any],
            let p256dh = keys["p256dh"] as? String, let auth = keys["auth"] as? String
        {
            // JS's shape: {"endpoint","p256dh","auth"}.
            out +=
                ",\"pushChannel\":{\"endpoint\":" + jsonStringLiteral(endpoint) + ",\"p256dh\":"
                + jsonStringLiteral(p256dh)
                + ",\"auth\":" + jsonStringLiteral(auth) + "}"
        } else {
            out += ",\"pushChannel\":" + jsonStringLiteral(pushChannel)
        }
        out += ",\"pushChannelExpired\":" + (pushChannelExpired ? "true" : "false")
        out += ",\"expirationTime\":" + jsonStringLiteral(Self.expirationTime)
        if lastUpdate > 0 { out += ",\"lastUpdate\":" + jsonStringLiteral(Self.w3c(lastUpdate)) }
        if !tags.isEmpty { out += ",\"tags\":" + Self.array(tags) }
        if !pushVariables.isEmpty { out += ",\"pushVariables\":" + Self.object(pushVariables) }
        if !templates.isEmpty {
            out += ",\"templates\":{"
            for (index, (name, template)) in templates.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { out += "," }
                out += jsonStringLiteral(name) + ":{\"body\":" + jsonStringLiteral(template.body)
                if !template.headers.isEmpty { out += ",\"headers\":" + Self.object(template.headers) }
                if let expiry = template.expiry { out += ",\"expiry\":" + jsonStringLiteral(expiry) }
                out += ",\"tags\":" + Self.array(template.tags) + "}"
            }
            out += "}"
        }
        out += "}"
        return Array(out.utf8)
    }

    private static func array(_ values: [String]) -> String {
        "[" + values.map(jsonStringLiteral).joined(separator: ",") + "]"
    }

    private static func object(_ values: [String: String]) -> String {
        "{"
            + values.sorted { $0.key < $1.key }.map { jsonStringLiteral($0.key) + ":" + jsonStringLiteral($0.value) }
            .joined(separator: ",") + "}"
    }

    /// The tags a send matches: the installation's own plus NH's system tags.
    public var audienceTags: [String] {
        var all = tags
        all.append("$InstallationId:{\(installationID)}")
        if let userID { all.append(Names.installationUserTag(userID)) }
        return all
    }

    /// NH's `lastUpdate`, with milliseconds, exact (``iso8601(unixMillis:fractional:)``).
    package static func w3c(_ millis: Int64) -> String { iso8601(unixMillis: millis) }

    package static func canonicalJSON(_ object: [String: Any]) throws -> String {
        String(
            decoding: try jsonData(object, options: [.sortedKeys, .withoutEscapingSlashes]), as: UTF8.self)
    }
}

extension UInt8 {
    fileprivate var isLetterOrDigit: Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self)
    }
}
