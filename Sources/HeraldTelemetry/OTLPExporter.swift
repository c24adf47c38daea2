import Foundation
package import GRPCCore
import GRPCNIOTransportHTTP2Posix
import HeraldModel
public import Logging
import Metrics
public import ServiceLifecycle
import Synchronization

/// Tracing's settings, from OpenTelemetry's standard environment variables (the OTel SDK
/// specification's names and defaults, so a platform team sets them once for every process).
///
/// Tracing is off unless `OTEL_TRACES_EXPORTER=otlp` or an OTLP endpoint variable is set, and
/// always off with `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
public struct TracingConfiguration: Sendable, Equatable {
    public var serviceName: String
    public var resource: [String: String]
    public var host: String
    public var port: Int
    public var useTLS: Bool
    public var headers: [String: String]
    public var timeout: Duration
    public var sampler: TraceSampler
    public var parentBased: Bool
    public var scheduleDelay: Duration
    public var maxQueueSize: Int
    public var maxExportBatchSize: Int

    /// nil when tracing is off; a ``ConfigError`` for a value Herald cannot honour (an exporter or
    /// protocol it does not speak, a malformed endpoint or number), so a typo is not silently "off".
    public init?(environment: [String: String], defaultServiceName: String) throws {
        func value(_ name: String) -> String? {
            guard let text = environment[name]?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
            return text
        }
        func traces(_ suffix: String) -> String? {
            value("OTEL_EXPORTER_OTLP_TRACES_\(suffix)") ?? value("OTEL_EXPORTER_OTLP_\(suffix)")
        }
        func number(_ name: String, default fallback: Int, range: ClosedRange<Int>) throws -> Int {
            guard let text = value(name) else { return fallback }
            guard let number = Int(text), range.contains(number) else {
                throw ConfigError("\(name) must be a whole number in \(range.lowerBound)...\(range.upperBound)")
            }
            return number
        }
        if value("OTEL_SDK_DISABLED")?.lowercased() == "true" { return nil }
        let endpoint = traces("ENDPOINT")
        switch value("OTEL_TRACES_EXPORTER")?.lowercased() {
        case nil: guard endpoint != nil else { return nil }
        case "none": return nil
        case "otlp": break
        case let other?:
            throw ConfigError("OTEL_TRACES_EXPORTER=\(other): Herald exports traces over OTLP only (otlp|none)")
        }
        if let proto = traces("PROTOCOL"), proto != "grpc" {
            throw ConfigError("OTEL_EXPORTER_OTLP_PROTOCOL=\(proto): Herald exports OTLP over gRPC only (grpc)")
        }
        let url = endpoint ?? "http://localhost:4317"
        guard let parts = URLComponents(string: url), let scheme = parts.scheme, ["http", "https"].contains(scheme),
            let host = parts.host, !host.isEmpty
        else { throw ConfigError("OTLP endpoint \(url) is not an http:// or https:// URL with a host") }
        self.host = host
        port = parts.port ?? 4317
        guard (1...65535).contains(port) else {
            throw ConfigError("OTLP endpoint \(url): port \(port) is out of range")
        }
        useTLS = scheme == "https"
        headers = Self.pairs(traces("HEADERS"))
        timeout = .milliseconds(try number("OTEL_EXPORTER_OTLP_TIMEOUT", default: 10_000, range: 1...600_000))
        serviceName = value("OTEL_SERVICE_NAME") ?? defaultServiceName
        resource = Self.pairs(value("OTEL_RESOURCE_ATTRIBUTES"))
        // The ratio samplers' argument (the specification's default: 1). Read only by them, and
        // refused rather than read as 1 when it is not a ratio: a typo must not sample everything.
        func ratio() throws -> Double {
            guard let text = value("OTEL_TRACES_SAMPLER_ARG") else { return 1 }
            guard let ratio = Double(text), (0...1).contains(ratio) else {
                throw ConfigError("OTEL_TRACES_SAMPLER_ARG=\(text) is not a ratio from 0 to 1")
            }
            return ratio
        }
        switch value("OTEL_TRACES_SAMPLER")?.lowercased() ?? "parentbased_always_on" {
        case "always_on": (sampler, parentBased) = (.always, false)
        case "always_off": (sampler, parentBased) = (.never, false)
        case "traceidratio": (sampler, parentBased) = (.ratio(try ratio()), false)
        case "parentbased_always_on": (sampler, parentBased) = (.always, true)
        case "parentbased_always_off": (sampler, parentBased) = (.never, true)
        case "parentbased_traceidratio": (sampler, parentBased) = (.ratio(try ratio()), true)
        case let other: throw ConfigError("OTEL_TRACES_SAMPLER=\(other) is not one Herald knows")
        }
        scheduleDelay = .milliseconds(try number("OTEL_BSP_SCHEDULE_DELAY", default: 5000, range: 1...600_000))
        maxQueueSize = try number("OTEL_BSP_MAX_QUEUE_SIZE", default: 2048, range: 1...1_000_000)
        maxExportBatchSize = min(
            try number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", default: 512, range: 1...100_000), maxQueueSize)
    }

    /// `key=value,key=value` (W3C baggage form, values percent-decoded), as OTel's variables write them.
    static func pairs(_ text: String?) -> [String: String] {
        var pairs: [String: String] = [:]
        for item in (text ?? "").split(separator: ",") {
            guard let equals = item.firstIndex(of: "=") else { continue }
            let key = item[..<equals].trimmingCharacters(in: .whitespaces)
            let raw = item[item.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            guard !key.isEmpty else { continue }
            pairs[key] = raw.removingPercentEncoding ?? raw
        }
        return pairs
    }

    /// The resource attributes every span carries: `service.name` first.
    var resourceAttributes: [(String, String)] {
        [("service.name", serviceName)] + resource.filter { $0.key != "service.name" }.sorted { $0.key < $1.key }
    }
}

/// Sends finished spans to an OTLP collector over gRPC (`TraceService/Export`), in batches: OTel's
/// batch span processor. Bounded: a span that finds the queue full is dropped and counted
/// (`herald_tracing_spans_dropped_total`), and an export that fails is dropped, never retried
/// forever, so a collector that is down costs memory up to the queue size and nothing else.
public final class OTLPExporter: Service, Sendable {
    public let configuration: TracingConfiguration
    private let logger: Logger
    private let queue: Mutex<SpanQueue>
    /// Why the export loop wakes: `true` for the schedule (send everything queued), `false` for a
    /// full batch (send full batches only).
    private let wakeups: (stream: AsyncStream<Bool>, continuation: AsyncStream<Bool>.Continuation)
    private let dropped = Counter(label: "herald_tracing_spans_dropped_total")
    private let exported = Counter(label: "herald_tracing_spans_exported_total")
    /// Whether the last export failed, so a collector that is down is logged once per outage.
    private let failing = Mutex(false)

    public init(configuration: TracingConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        queue = Mutex(SpanQueue(capacity: configuration.maxQueueSize, batchSize: configuration.maxExportBatchSize))
        // The newest reason only: a schedule's wake-up replaced by a full batch's sends what is left
        // one period later, and is never lost for longer.
        wakeups = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// The tracer whose spans this exporter sends.
    public func makeTracer() -> HeraldTracer {
        HeraldTracer(
            resource: configuration.resourceAttributes, sampler: configuration.sampler,
            parentBased: configuration.parentBased
        ) { [self] span in enqueue(span) }
    }

    func enqueue(_ span: FinishedSpan) {
        let (accepted, full) = queue.withLock { $0.append(span) }
        if !accepted { dropped.increment() }
        if full { wakeups.continuation.yield(false) }
    }

    public func run() async throws {
        let transport = try HTTP2ClientTransport.Posix(
            target: .dns(host: configuration.host, port: configuration.port),
            transportSecurity: configuration.useTLS ? .tls : .plaintext)
        let client = GRPCClient(transport: transport)
        let delay = configuration.scheduleDelay
        let continuation = wakeups.continuation
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await client.runConnections() }
            group.addTask {
                while !Task.isCancelled {
                    do { try await Task.sleep(for: delay) } catch { return }
                    continuation.yield(true)
                }
            }
            await withGracefulShutdownHandler {
                for await scheduled in wakeups.stream { await exportQueued(client, all: scheduled) }
            } onGracefulShutdown: {
                continuation.finish()
            }
            // What the last spans of the drain added.
            await exportQueued(client, all: true)
            client.beginGracefulShutdown()
            group.cancelAll()
        }
    }

    /// Sends what is queued, a batch at a time: every span when `all` (the schedule, the drain),
    /// else full batches only. What an export costs is mostly per call (grpc-swift's generic
    /// client, the HTTP/2 stream): when every wake-up sent all it found, the spans queued while one
    /// export ran went as the next, and a busy process sent batches of a few spans back to back.
    private func exportQueued(_ client: GRPCClient<HTTP2ClientTransport.Posix>, all: Bool) async {
        while true {
            let batch = queue.withLock { $0.take(all: all) }
            guard !batch.isEmpty else { return }
            await export(batch, client)
        }
    }

    private func export(_ spans: [FinishedSpan], _ client: GRPCClient<HTTP2ClientTransport.Posix>) async {
        let bytes = OTLPTraceEncoding.exportRequest(
            resource: configuration.resourceAttributes, scope: "herald", version: "1", spans: spans)
        var metadata: Metadata = [:]
        for (key, value) in configuration.headers { metadata.addString(value, forKey: key.lowercased()) }
        var options = CallOptions.defaults
        options.timeout = configuration.timeout
        do {
            _ = try await client.unary(
                request: ClientRequest(message: bytes, metadata: metadata),
                descriptor: MethodDescriptor(
                    fullyQualifiedService: "opentelemetry.proto.collector.trace.v1.TraceService", method: "Export"),
                serializer: RawBytesCoder(), deserializer: RawBytesCoder(), options: options
            ) { try $0.message }
            exported.increment(by: spans.count)
            if failing.withLock({ was in
                defer { was = false }
                return was
            }) {
                logger.notice("trace export works again")
            }
        } catch {
            dropped.increment(by: spans.count)
            if !failing.withLock({ was in
                defer { was = true }
                return was
            }) {
                logger.warning(
                    "cannot export traces; dropping spans until the collector answers",
                    metadata: [
                        "herald.error": "\(error)",
                        "herald.endpoint": "\(configuration.host):\(configuration.port)",
                    ])
            }
        }
    }
}

/// The exporter's queue of finished spans: bounded, and handed out in batches (OTel's batch span
/// processor: a batch goes when it is full or when the schedule comes).
struct SpanQueue {
    let capacity: Int
    let batchSize: Int
    private(set) var spans: [FinishedSpan] = []

    init(capacity: Int, batchSize: Int) {
        self.capacity = max(1, capacity)
        self.batchSize = max(1, min(batchSize, self.capacity))
    }

    /// Queues `span` unless the queue is full. `full`: this span made a batch (the export loop is
    /// woken). Once woken, the loop takes full batches until fewer than one are left, so the spans
    /// queued while it exports wake it no more: only the span that completes a batch does.
    mutating func append(_ span: FinishedSpan) -> (accepted: Bool, full: Bool) {
        guard spans.count < capacity else { return (false, false) }
        spans.append(span)
        return (true, spans.count == batchSize)
    }

    /// The next batch to send: a full one; or, when `all`, what is queued up to a batch; else none.
    mutating func take(all: Bool) -> [FinishedSpan] {
        guard spans.count >= batchSize || (all && !spans.isEmpty) else { return [] }
        let batch = Array(spans.prefix(batchSize))
        spans.removeFirst(batch.count)
        return batch
    }
}
