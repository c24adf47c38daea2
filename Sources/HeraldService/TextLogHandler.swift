public import Logging

/// swift-log's `StreamLogHandler` on standard error, with the logger's metadata kept here and
/// rendered only when a line is written.
///
/// `StreamLogHandler` renders its metadata to text whenever a key is set. Hummingbird sets
/// `hb.request.id` on every request's logger, and most requests log nothing at the default level:
/// in herald-edge that rendering cost about 8k instructions per request (callgrind, a tutorial
/// GET), some 2% of the request. The lines are the same: this handler merges the metadata as
/// `StreamLogHandler` does (its own, then the provider's, then the call's) and hands them over
/// with the line.
public struct TextLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private var stream: StreamLogHandler

    public var logLevel: Logger.Level {
        get { stream.logLevel }
        set { stream.logLevel = newValue }
    }

    public init(label: String, metadataProvider: Logger.MetadataProvider? = nil) {
        self.init(
            StreamLogHandler.standardError(label: label, metadataProvider: nil), metadataProvider: metadataProvider)
    }

    /// Over `stream`, whose own metadata and provider stay unused (a test's, writing to a string).
    package init(_ stream: StreamLogHandler, metadataProvider: Logger.MetadataProvider?) {
        self.metadataProvider = metadataProvider
        self.stream = stream
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var event = event
        var merged = metadata
        if let provided = metadataProvider?.get(), !provided.isEmpty {
            merged.merge(provided) { _, new in new }
        }
        if let explicit = event.metadata { merged.merge(explicit) { _, new in new } }
        event.metadata = merged.isEmpty ? nil : merged
        stream.log(event: event)
    }
}
