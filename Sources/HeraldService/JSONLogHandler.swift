public import Foundation
import HeraldModel
import HeraldRPC
public import Logging
import Synchronization

/// swift-log handler writing one JSON object per line to standard error, for container log
/// collectors: `{"time","level","label","message",…metadata}`. Metadata keys keep their names
/// (`herald.request_id` follows one request across services).
///
/// swift-log ships only the text `StreamLogHandler`; no JSON handler is in the package mirror, and
/// this one is a few lines over `JSONSerialization`.
public struct JSONLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let output: FileHandle
    private static let lock = Mutex(())

    /// Lines go to `output`: standard error in a process, a service's own file in a test's
    /// in-process stack.
    public init(label: String, metadataProvider: Logger.MetadataProvider? = nil, output: FileHandle = .standardError) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.output = output
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var object: [String: Any] = [
            "time": Date().formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true)),
            "level": event.level.rawValue,
            "label": label,
            "message": "\(event.message)",
        ]
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        for (key, value) in merged where object[key] == nil { object[key] = Self.plain(value) }
        guard
            var line = try? jsonData(object, options: [.sortedKeys, .withoutEscapingSlashes])
        else { return }
        line.append(UInt8(ascii: "\n"))
        Self.lock.withLock { _ in output.write(line) }
    }

    private static func plain(_ value: Logger.MetadataValue) -> Any {
        switch value {
        case .string(let text): text
        case .stringConvertible(let convertible): convertible.description
        case .array(let values): values.map(plain)
        case .dictionary(let values): values.mapValues(plain)
        }
    }
}
