import Foundation

/// Settings from the command line and the environment, in that order of precedence.
///
/// Key `rpc-timeout-ms` is read from `--rpc-timeout-ms 900` or `--rpc-timeout-ms=900`, else from the
/// environment variable `HERALD_RPC_TIMEOUT_MS`, else the caller's default. A flag with no value
/// (`--check-health`) reads as "true". Hand-written rather than swift-configuration: Herald needs
/// exactly these two sources plus a clear error for an unknown flag, and that is smaller than the
/// dependency.
public struct ConfigReader: Sendable {
    private let arguments: [String: String]
    private let environment: [String: String]

    public init(arguments: [String], environment: [String: String] = [:]) throws {
        var parsed: [String: String] = [:]
        var i = 0
        while i < arguments.count {
            let argument = arguments[i]
            guard argument.hasPrefix("--"), argument.count > 2 else {
                throw ConfigError("unexpected argument \"\(argument)\"; settings are --key value")
            }
            let body = argument.dropFirst(2)
            if let equals = body.firstIndex(of: "=") {
                parsed[String(body[..<equals])] = String(body[body.index(after: equals)...])
            } else if i + 1 < arguments.count, !arguments[i + 1].hasPrefix("--") {
                parsed[String(body)] = arguments[i + 1]
                i += 1
            } else {
                parsed[String(body)] = "true"
            }
            i += 1
        }
        self.arguments = parsed
        self.environment = environment
    }

    /// The reader of this process: its arguments and its environment.
    public static func fromProcess() throws -> ConfigReader {
        try ConfigReader(
            arguments: Array(CommandLine.arguments.dropFirst()),
            environment: ProcessInfo.processInfo.environment
        )
    }

    /// The environment variable that carries `key`.
    public static func environmentName(_ key: String) -> String {
        "HERALD_" + key.uppercased().replacingOccurrences(of: "-", with: "_")
    }

    public func string(_ key: String) -> String? {
        arguments[key] ?? environment[Self.environmentName(key)]
    }

    public func string(_ key: String, default value: String) -> String {
        string(key) ?? value
    }

    public func int(_ key: String, default value: Int) throws -> Int {
        guard let text = string(key) else { return value }
        guard let number = Int(text) else { throw ConfigError("\(key) must be a whole number, not \"\(text)\"") }
        return number
    }

    public func bool(_ key: String, default value: Bool = false) throws -> Bool {
        switch string(key)?.lowercased() {
        case nil: return value
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        case let other?: throw ConfigError("\(key) must be true or false, not \"\(other)\"")
        }
    }

    /// One of a fixed set of words, e.g. `auth-mode` in tutorial|accounts.
    public func choice<T: RawRepresentable & CaseIterable>(_ key: String, default value: T) throws -> T
    where T.RawValue == String {
        guard let text = string(key) else { return value }
        guard let choice = T(rawValue: text.lowercased()) else {
            let words = T.allCases.map(\.rawValue).joined(separator: "|")
            throw ConfigError("\(key) must be one of \(words), not \"\(text)\"")
        }
        return choice
    }

    /// Refuses command-line keys nobody reads: a typo must not silently fall back to a default.
    public func rejectUnknownArguments(known: Set<String>) throws {
        let unknown = Set(arguments.keys).subtracting(known).sorted()
        if !unknown.isEmpty {
            throw ConfigError(
                "unknown setting\(unknown.count > 1 ? "s" : "") " + unknown.map { "--\($0)" }.joined(separator: ", ")
                    + " (--help lists the settings)")
        }
    }
}

/// A configuration mistake, reported to the operator before anything starts.
public struct ConfigError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
