import Foundation
public import HeraldModel
public import HeraldProto

/// NH's JSON-Patch subset for installations (docs/notification-hubs.md, "Installations"): `add`, `remove` and `replace` on
/// `/pushChannel`, `/userId`, `/platform`, `/tags`, `/tags/{tag}`, `/pushVariables[/{name}]` and
/// `/templates/{name}[/body|/headers|/expiry|/tags]`.
///
/// Values may be JSON strings, or objects and arrays either as JSON or JSON-encoded in a string
/// (every SDK types `value` as a string). `replace` is `remove` then `add`. The result is validated
/// as a whole, so a patch cannot leave an installation that a PUT would refuse.
extension Installation {
    /// The most operations one patch may hold.
    public static let maxPatchOperations = 200

    /// NH's JSON-Patch body as typed operations (herald-edge reads it so): each value kept as JSON
    /// text, read where the patch is applied, since its type depends on its path and on the
    /// installation it applies to.
    public static func patchOperations(_ data: [UInt8]) throws -> [InstallationPatchOperation] {
        guard let operations = try? JSONSerialization.jsonObject(with: Data(data)) as? [Any] else {
            throw ServiceError.invalidArgument(
                "the body must be a JSON array of {\"op\",\"path\",\"value\"} operations")
        }
        guard operations.count <= maxPatchOperations else {
            throw ServiceError.invalidArgument("at most \(maxPatchOperations) operations per patch")
        }
        return try operations.enumerated().map { index, element in
            guard let operation = element as? [String: Any], let op = operation["op"] as? String,
                let path = operation["path"] as? String
            else {
                throw ServiceError.invalidArgument("operation \(index): each operation needs op and path")
            }
            var value = ""
            if let given = operation["value"], !(given is NSNull) {
                value = String(decoding: try jsonData(given, options: [.withoutEscapingSlashes]), as: UTF8.self)
            }
            return InstallationPatchOperation(op: op, path: path, valueJson: value)
        }
    }

    /// Applies NH's JSON-Patch body (a caller from before typed operations).
    public mutating func apply(patch data: [UInt8], hosts: RegistrationRules.PushHosts) throws {
        try apply(operations: try Self.patchOperations(data), hosts: hosts)
    }

    /// Applies `operations` in order, all or nothing: they apply to a copy, kept only when every one
    /// passes and the result is an installation a PUT would take.
    public mutating func apply(operations: [InstallationPatchOperation], hosts: RegistrationRules.PushHosts) throws {
        guard operations.count <= Self.maxPatchOperations else {
            throw ServiceError.invalidArgument("at most \(Self.maxPatchOperations) operations per patch")
        }
        var patched = self
        for (index, operation) in operations.enumerated() {
            let op = operation.op.lowercased()
            do {
                var value: Any?
                if !operation.valueJson.isEmpty {
                    guard
                        let parsed = try? JSONSerialization.jsonObject(
                            with: Data(operation.valueJson.utf8), options: .fragmentsAllowed)
                    else { throw ServiceError.invalidArgument("the value is not JSON") }
                    value = parsed
                }
                try patched.apply(op: op, path: operation.path, value: value)
            } catch let error as ServiceError {
                throw ServiceError.invalidArgument(
                    "operation \(index) (\(op) \(operation.path.prefix(300))): \(error.message)")
            }
        }
        try patched.validate(hosts: hosts)
        self = patched
    }

    private mutating func apply(op: String, path: String, value: Any?) throws {
        guard ["add", "remove", "replace"].contains(op) else {
            throw ServiceError.invalidArgument("op must be add, remove or replace")
        }
        guard path.hasPrefix("/") else { throw ServiceError.invalidArgument("path must start with /") }
        let segments = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map {
            $0.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
        }
        func required() throws -> Any {
            guard let value, !(value is NSNull) else { throw ServiceError.invalidArgument("\(op) needs a value") }
            return value
        }
        func string() throws -> String {
            guard let text = try required() as? String else {
                throw ServiceError.invalidArgument("the value must be a string")
            }
            return text
        }
        let remove = op == "remove"
        switch (segments.first?.lowercased() ?? "", segments.count) {
        case ("pushchannel", 1):
            guard !remove else {
                throw ServiceError.invalidArgument("pushChannel is required; it can be replaced, not removed")
            }
            let channel = try Self.pushChannel(try required(), platform: platform)
            if channel != pushChannel { pushChannelExpired = false }
            pushChannel = channel
        case ("platform", 1):
            guard !remove else {
                throw ServiceError.invalidArgument("platform is required; it can be replaced, not removed")
            }
            platform = try Self.platform(try string())
        case ("userid", 1), ("user", 1):
            userID = remove ? nil : try Self.userID(try string())
        case ("tags", 1):
            if remove {
                tags = []
                return
            }
            let value = Self.jsonValue(try required())
            let given: [String]
            if let array = value as? [Any] {
                given = try Self.tags(array)
            } else if let one = value as? String {
                given = try RegistrationRules.validateTags([one])
            } else {
                throw ServiceError.invalidArgument("the value must be a tag or an array of tags")
            }
            tags = try RegistrationRules.validateTags((op == "replace" ? [] : tags) + given)
        case ("tags", 2):
            let tag = segments[1]
            if remove {
                guard tags.contains(tag) else {
                    throw ServiceError.invalidArgument("tag \(tag) is not on this installation")
                }
                tags.removeAll { $0 == tag }
            } else {
                tags = try RegistrationRules.validateTags(tags + [tag])
            }
        case ("pushvariables", 1):
            pushVariables = remove ? [:] : try Self.stringMap(Self.jsonValue(try required()), "pushVariables")
        case ("pushvariables", 2):
            if remove { pushVariables[segments[1]] = nil } else { pushVariables[segments[1]] = try string() }
        case ("templates", 2):
            let name = segments[1]
            if remove {
                guard templates.removeValue(forKey: name) != nil else {
                    throw ServiceError.invalidArgument("no template \(name)")
                }
            } else {
                templates[name] = try Self.template(name: name, try required())
            }
        case ("templates", 3):
            let name = segments[1]
            guard var template = templates[name] else { throw ServiceError.invalidArgument("no template \(name)") }
            switch segments[2].lowercased() {
            case "body":
                guard !remove else { throw ServiceError.invalidArgument("a template needs its body") }
                template.body = try string()
            case "headers":
                template.headers = remove ? [:] : try Self.stringMap(Self.jsonValue(try required()), "headers")
            case "expiry":
                template.expiry = remove ? nil : try string()
            case "tags":
                let given = remove ? [] : try Self.tags(Self.jsonValue(try required()) as? [Any] ?? [try string()])
                template.tags = try RegistrationRules.validateTags((op == "add" ? template.tags : []) + given + [name])
            default:
                throw ServiceError.invalidArgument("a template's parts are body, headers, expiry and tags")
            }
            templates[name] = template
        default:
            throw ServiceError.invalidArgument(
                "path cannot be patched: use /pushChannel, /userId, /platform, /tags[/{tag}], /pushVariables[/{name}] or /templates/{name}[/body|/headers|/expiry|/tags]"
            )
        }
    }
}
