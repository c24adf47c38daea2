import HeraldModel
import HeraldRPC
import HeraldTestSupport
import Logging
import Metrics
import Synchronization
import Testing

/// What a handler's error answers its caller, whichever transport: a ServiceError as it is, a
/// cancellation as CANCELLED, and anything else as INTERNAL "internal error" with its detail in the
/// service's log only (a SQL error or a file path never reaches a caller).
@Suite("error answers", .watchedForStalls)
struct ServiceErrorAnswerTests {
    /// A log handler that keeps each line's level, message and metadata.
    struct Captured: LogHandler {
        let lines: Lines
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            lines.all.withLock { $0.append((event.level, "\(event.message)", event.metadata ?? [:])) }
        }
    }

    final class Lines: Sendable {
        let all = Mutex<[(Logger.Level, String, Logger.Metadata)]>([])
    }

    static func context(_ lines: Lines) -> RPCContext {
        let handler = Captured(lines: lines)
        return RPCContext(requestID: "r-1", method: "test/Method", logger: Logger(label: "test") { _ in handler })
    }

    struct Secret: Error, CustomStringConvertible {
        var description: String { "SQLITE_CORRUPT at /var/lib/herald/auth.sqlite (password hash 0xdeadbeef)" }
    }

    struct Convertible: ServiceErrorConvertible {
        var serviceError: ServiceError?
    }

    @Test("a ServiceError is answered as it is, metadata included, logged at debug only")
    func expected() {
        let lines = Lines()
        let error = ServiceError.resourceExhausted("locked", retryAfterSeconds: 42)
        let answer = ServiceError.answering(error, in: Self.context(lines))
        #expect(answer == error && answer.retryAfterSeconds == 42)
        #expect(lines.all.withLock { $0.map(\.0) } == [.debug])
    }

    @Test("an unexpected error: INTERNAL with a generic message; its detail logged as an error, never answered")
    func unexpected() {
        let lines = Lines()
        for error in [Secret() as any Error, Convertible(serviceError: nil)] {
            let answer = ServiceError.answering(error, in: Self.context(lines))
            #expect(answer.code == .internal && answer.message == "internal error" && answer.metadata.isEmpty)
        }
        let logged = lines.all.withLock { $0 }
        #expect(logged.map(\.0) == [.error, .error])
        #expect("\(logged.first?.2["herald.error"] ?? "")".contains("SQLITE_CORRUPT"))
        #expect(ServiceError.from(Secret()).expected == false)
    }

    @Test("a cancellation is CANCELLED; a library error with a known status keeps it; a full disk is logged as such")
    func mapped() {
        let lines = Lines()
        #expect(ServiceError.answering(CancellationError(), in: Self.context(lines)).code == .cancelled)
        let known = ServiceError.answering(
            Convertible(serviceError: .invalidArgument("bad")), in: Self.context(lines))
        #expect(known == .invalidArgument("bad"))
        let full = ServiceError.answering(Convertible(serviceError: .storageFull), in: Self.context(lines))
        #expect(full.isStorageFull && full.code == .unavailable)
        #expect(lines.all.withLock { $0.map(\.0) } == [.debug, .debug, .warning])
    }

    @Test("the metadata a caller acts on: retry-after whole seconds not below 0, quota and storage reasons")
    func metadata() {
        #expect(ServiceError.resourceExhausted("x", retryAfterSeconds: 0).retryAfterSeconds == 0)
        for bad in ["-1", "1.5", "soon", ""] {
            #expect(
                ServiceError(.resourceExhausted, "x", metadata: ["retry-after": bad]).retryAfterSeconds == nil, "\(bad)"
            )
        }
        #expect(ServiceError.quotaExceeded("month").isQuotaExceeded)
        #expect(!ServiceError(.permissionDenied, "x", metadata: ["herald-reason": "quota-exceeded"]).isQuotaExceeded)
        #expect(!ServiceError(.internal, "x", metadata: ["herald-reason": "storage-full"]).isStorageFull)
        #expect(ServiceError.metadataKeys == ["retry-after", "herald-reason"])
        #expect(ServiceError.notFound("n").description == "NOT_FOUND: n")
        #expect(StatusCode.allCases.map(\.rawValue) == Array(0...16))
    }

    @Test("per-key metrics: a key's handles are made once, however often it is counted, and from any thread")
    func handlesOnce() async {
        final class Made: Sendable { let counts = Mutex<[String: Int]>([:]) }
        let byKey = CounterAndTimerByKey<String>()
        let made = Made()
        await withTaskGroup(of: Void.self) { group in
            for n in 0..<200 {
                group.addTask {
                    let key = "k\(n % 4)"
                    byKey.record(key, nanoseconds: 1) {
                        made.counts.withLock { $0[key, default: 0] += 1 }
                        return (Counter(label: "test_\(key)_total"), Metrics.Timer(label: "test_\(key)_seconds"))
                    }
                }
            }
        }
        #expect(made.counts.withLock { $0 } == ["k0": 1, "k1": 1, "k2": 1, "k3": 1])
    }
}
