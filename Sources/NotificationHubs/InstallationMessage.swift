public import HeraldModel
public import HeraldProto

/// An installation as it crosses the RPC (`HubInstallation`): herald-edge reads NH's JSON into it
/// and writes NH's JSON from it; herald-registration validates and stores what it holds.
extension Installation {
    /// This installation as the RPC carries it, its named fields sorted by name.
    public var message: HubInstallation {
        HubInstallation(
            installationID: installationID, userID: userID ?? "", platform: platform, pushChannel: pushChannel,
            tags: tags, pushVariables: Self.fields(pushVariables),
            templates: templates.sorted { $0.key < $1.key }.map { name, template in
                HubInstallationTemplate(
                    name: name, body: template.body, headers: Self.fields(template.headers),
                    expiry: template.expiry ?? "", hasExpiry: template.expiry != nil, tags: template.tags)
            },
            pushChannelExpired: pushChannelExpired, lastUpdateUnixMs: lastUpdate)
    }

    /// A caller's installation for `id` (PutInstallation), checked as NH's JSON is when read
    /// (its id, platform, push channel's form, user id, tags, template names and tags, no name
    /// twice); the read-only fields are ignored. ``validate(hosts:)`` checks the rest.
    public init(request message: HubInstallation, id: String) throws {
        try Self.validateID(id)
        guard message.installationID == id else {
            throw ServiceError.invalidArgument(
                "installationId \(message.installationID.prefix(300)) differs from the id in the path, \(id)")
        }
        guard NHPlatformNames.of(message.platform) != nil else {
            throw ServiceError.invalidArgument("platform must be apns, fcmv1, wns or browser")
        }
        self.init(
            installationID: id, platform: message.platform,
            pushChannel: try Self.pushChannel(message.pushChannel, platform: message.platform))
        userID = try Self.userID(message.userID)
        tags = try RegistrationRules.validateTags(message.tags)
        pushVariables = try Self.map(message.pushVariables, "pushVariables")
        for template in message.templates {
            guard templates[template.name] == nil else {
                throw ServiceError.invalidArgument("template \(template.name) is given twice")
            }
            templates[template.name] = try Self.template(
                name: template.name, body: template.body,
                headers: try Self.map(template.headers, "template \(template.name) headers"),
                expiry: template.hasExpiry ? template.expiry : nil, tags: template.tags)
        }
    }

    /// An installation as herald-registration answered it: stored, and validated when it was
    /// written, so read as it is (a row no PUT would take today still reads).
    public init(answer message: HubInstallation) {
        self.init(
            installationID: message.installationID, userID: message.userID.isEmpty ? nil : message.userID,
            platform: message.platform, pushChannel: message.pushChannel, tags: message.tags,
            pushVariables: Self.stored(message.pushVariables))
        for template in message.templates {
            templates[template.name] = Template(
                body: template.body, headers: Self.stored(template.headers),
                expiry: template.hasExpiry ? template.expiry : nil, tags: template.tags)
        }
        pushChannelExpired = message.pushChannelExpired
        lastUpdate = message.lastUpdateUnixMs
    }

    private static func fields(_ map: [String: String]) -> [HubRegistrationField] {
        map.sorted { $0.key < $1.key }.map { HubRegistrationField(name: $0.key, value: $0.value) }
    }

    /// Stored named values as a map (a stored name is never twice; the first would be kept).
    private static func stored(_ fields: [HubRegistrationField]) -> [String: String] {
        Dictionary(fields.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
    }

    /// Named values as a map; a name given twice is refused rather than one of them dropped.
    private static func map(_ fields: [HubRegistrationField], _ what: String) throws -> [String: String] {
        var map: [String: String] = [:]
        for field in fields {
            guard map.updateValue(field.value, forKey: field.name) == nil else {
                throw ServiceError.invalidArgument("\(what): \(field.name.prefix(100)) is given twice")
            }
        }
        return map
    }
}
