import HeraldService
import HeraldTestSupport
import Logging
import Synchronization
import Testing

/// The services' text log lines: what swift-log's StreamLogHandler writes, with the metadata
/// rendered only for a line that is written (TextLogHandler).
@Suite("text log lines", .watchedForStalls)
struct TextLogHandlerTests {
    /// A stream that keeps what is written.
    final class Captured: TextOutputStream, @unchecked Sendable {
        private let text = Mutex("")
        func write(_ string: String) { text.withLock { $0 += string } }
        var lines: [Substring] { text.withLock { $0 }.split(separator: "\n") }
    }

    /// Each line without its timestamp (everything before the level).
    static func untimed(_ lines: [Substring]) -> [String] {
        lines.map { line in
            let levels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
            let at = levels.compactMap { line.range(of: " \($0) herald-test:") }.first?.lowerBound ?? line.startIndex
            return String(line[at...].drop { $0 == " " })
        }
    }

    /// The same calls through both handlers at `level`, each with the same metadata provider.
    static func both(level: Logger.Level, _ body: (inout Logger) -> Void) -> (text: [String], stream: [String]) {
        let provider = Logger.MetadataProvider { ["trace_id": "t-1", "shared": "provider"] }
        let text = Captured()
        let stream = Captured()
        var viaText = Logger(label: "herald-test") { label in
            var handler = TextLogHandler(
                StreamLogHandler(label: label, stream: text, metadataProvider: nil), metadataProvider: provider)
            handler.logLevel = level
            return handler
        }
        var viaStream = Logger(label: "herald-test") { label in
            var handler = StreamLogHandler(label: label, stream: stream, metadataProvider: provider)
            handler.logLevel = level
            return handler
        }
        body(&viaText)
        body(&viaStream)
        return (untimed(text.lines), untimed(stream.lines))
    }

    @Test("the same lines as StreamLogHandler: the logger's metadata, the provider's, the call's, later ones winning")
    func sameLines() {
        let (text, stream) = Self.both(level: .info) { logger in
            logger[metadataKey: "hb.request.id"] = "r-7"
            logger[metadataKey: "shared"] = "logger"
            logger.info("plain")
            logger.warning("with metadata", metadata: ["herald.path": "/api/x", "shared": "call"])
            logger[metadataKey: "hb.request.id"] = nil
            logger.error("after a key is removed")
            logger.debug("below the level")
        }
        #expect(text.count == 3)
        #expect(text == stream)
        #expect(text.first?.contains("hb.request.id=r-7") == true)
        #expect(text.first?.contains("shared=provider") == true)
        #expect(text.dropFirst().first?.contains("shared=call") == true)
    }

    @Test("a logger with no metadata and no provider writes the line alone")
    func noMetadata() {
        let text = Captured()
        var logger = Logger(label: "herald-test") { label in
            TextLogHandler(StreamLogHandler(label: label, stream: text, metadataProvider: nil), metadataProvider: nil)
        }
        logger.logLevel = .info
        logger.info("alone")
        #expect(Self.untimed(text.lines) == ["info herald-test: [HeraldServiceTests] alone"])
    }
}
