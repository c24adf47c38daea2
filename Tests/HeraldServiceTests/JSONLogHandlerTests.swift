import Foundation
import HeraldService
import HeraldTestSupport
import Logging
import Testing

/// The services' JSON log lines, as a collector reads them: one object per line whatever a
/// message or a value holds (a request's text cannot start a line of its own), metadata merged.
@Suite("JSON log lines", .watchedForStalls)
struct JSONLogHandlerTests {
    /// Logs through a handler writing to a file, and returns the lines parsed.
    static func lines(
        level: Logger.Level = .info, provider: Logger.MetadataProvider? = nil,
        _ body: (inout Logger) -> Void
    ) throws -> [[String: Any]] {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("log-\(UUID()).jsonl").path
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let output = try #require(FileHandle(forWritingAtPath: path))
        var logger = Logger(label: "herald-test") { label in
            var handler = JSONLogHandler(label: label, metadataProvider: provider, output: output)
            handler.logLevel = level
            return handler
        }
        body(&logger)
        try output.close()
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.isEmpty || text.hasSuffix("\n"))
        return try text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
        }
    }

    @Test("one line per event, whatever the message holds: newlines, quotes, control bytes, another JSON object")
    func oneLinePerEvent() throws {
        let hostile = "a\nb\r\n{\"level\":\"critical\"}\u{0}\u{1b}[31m\u{2028}é"
        let lines = try Self.lines { logger in
            logger.info("\(hostile)")
            logger.warning("second", metadata: ["herald.path": "\(hostile)"])
        }
        #expect(lines.count == 2)
        #expect(lines[0]["message"] as? String == hostile && lines[0]["level"] as? String == "info")
        #expect(lines[1]["herald.path"] as? String == hostile && lines[1]["level"] as? String == "warning")
        #expect(
            lines.allSatisfy {
                $0["label"] as? String == "herald-test" && ($0["time"] as? String)?.hasSuffix("Z") == true
            })
    }

    @Test("metadata: the event's over the provider's over the logger's; the line's own fields are never replaced")
    func metadata() throws {
        let provider = Logger.MetadataProvider { ["herald.trace": "t-1", "herald.request_id": "from-provider"] }
        let lines = try Self.lines(provider: provider) { logger in
            logger[metadataKey: "herald.service"] = "edge"
            logger[metadataKey: "herald.request_id"] = "from-logger"
            logger.info(
                "m",
                metadata: [
                    "herald.request_id": "from-event", "message": "forged", "level": "critical",
                    "herald.list": ["a", ["b": "c"]], "herald.count": .stringConvertible(42),
                ])
        }
        let line = try #require(lines.first)
        #expect(line["herald.request_id"] as? String == "from-event")
        #expect(line["herald.trace"] as? String == "t-1" && line["herald.service"] as? String == "edge")
        #expect(line["message"] as? String == "m" && line["level"] as? String == "info")
        #expect(line["herald.count"] as? String == "42")
        let list = try #require(line["herald.list"] as? [Any])
        #expect(list.first as? String == "a" && (list.last as? [String: String]) == ["b": "c"])
    }

    @Test("below the handler's level nothing is written")
    func level() throws {
        let lines = try Self.lines(level: .warning) { logger in
            logger.debug("no")
            logger.info("no")
            logger.error("yes")
        }
        #expect(lines.map { $0["message"] as? String } == ["yes"])
    }
}
