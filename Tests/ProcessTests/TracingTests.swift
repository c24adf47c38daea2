import Foundation
import HeraldRPC
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// Distributed tracing across the five real executables, collected by an OTLP receiver no one here
/// wrote the decoding of (`Tests/python/otlp_receiver.py`: opentelemetry-proto's classes and grpcio).
@Suite("distributed tracing over OTLP", .serialized, .timeLimit(.minutes(4)), .storeIndependent, .watchedForStalls)
struct TracingTests {
    /// The OTLP receiver as a child process, and the spans it has written so far.
    final class Receiver {
        let process = Process()
        let spansPath: String
        let port: Int

        init(folder: String) async throws {
            let python = try #require(which("python3"), "python3 is required (scripts/setup.sh --test installs it)")
            let portPath = folder + "/otlp.port"
            spansPath = folder + "/spans.jsonl"
            process.executableURL = URL(fileURLWithPath: python)
            process.arguments = [
                packageRoot.appendingPathComponent("Tests/python/otlp_receiver.py").path, portPath, spansPath,
            ]
            process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
            try process.run()
            let deadline = ContinuousClock.now + .seconds(30)
            while true {
                if let text = try? String(contentsOfFile: portPath, encoding: .utf8), let port = Int(text) {
                    self.port = port
                    break
                }
                guard process.isRunning else { throw StackError(description: "otlp_receiver.py exited at start") }
                try #require(ContinuousClock.now < deadline, "the OTLP receiver did not start in 30 s")
                try await Task.sleep(for: .milliseconds(50))
            }
        }

        /// SIGKILL, not SIGTERM: a child of the test runner inherits its threads' blocked signals.
        func stop() {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }

        func spans() -> [Span] {
            guard let text = try? String(contentsOfFile: spansPath, encoding: .utf8) else { return [] }
            return text.split(separator: "\n").compactMap { line in
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                    return nil
                }
                return Span(object)
            }
        }

        /// Polls until `done` holds for the spans of `trace`, or 30 s have passed.
        func waitForTrace(_ trace: String, until done: ([Span]) -> Bool) async throws -> [Span] {
            let deadline = ContinuousClock.now + .seconds(30)
            while true {
                let spans = spans().filter { $0.traceID == trace }
                if done(spans) || ContinuousClock.now >= deadline { return spans }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    struct Span: CustomStringConvertible {
        var service: String
        var name: String
        var traceID: String
        var spanID: String
        var parentSpanID: String
        var kind: Int
        var attributes: [String: Any]
        var status: Int

        init?(_ object: [String: Any]) {
            guard let service = object["service"] as? String, let name = object["name"] as? String,
                let traceID = object["trace_id"] as? String, let spanID = object["span_id"] as? String
            else { return nil }
            self.service = service
            self.name = name
            self.traceID = traceID
            self.spanID = spanID
            parentSpanID = object["parent_span_id"] as? String ?? ""
            kind = object["kind"] as? Int ?? 0
            attributes = object["attributes"] as? [String: Any] ?? [:]
            status = object["status"] as? Int ?? 0
        }

        var description: String { "\(service) \(name) \(spanID)←\(parentSpanID)" }
    }

    /// A stack exporting to a fresh receiver (`tracing`: the OTEL_* variables besides the endpoint),
    /// every platform sent to the APNs/FCM/WNS/Web Push doubles, auth verdicts never cached (so
    /// each request's trace shows auth's check).
    static func withTracedStack(
        tracing: [String: String] = [:], transport: RPCTransport = .lean,
        configure: (inout StackConfiguration) -> Void = { _ in },
        _ body: (Receiver, ProviderFixture, LiveStack) async throws -> Void
    ) async throws {
        try await LiveStack.withDirectory { folder in
            let receiver = try await Receiver(folder: folder)
            defer { receiver.stop() }
            let fixture = try await ProviderFixture.start(in: folder)
            defer { Task { await fixture.stop() } }
            try await LiveStack.with(runner: .processes, directory: folder + "/stack") { configuration in
                fixture.configure(&configuration)
                configuration.rpcTransport = transport
                configuration.extraArguments["auth", default: []] += ["--verdict-cache-seconds", "0"]
                configuration.environment = [
                    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(receiver.port)",
                    "OTEL_BSP_SCHEDULE_DELAY": "100",
                    "OTEL_EXPORTER_OTLP_HEADERS": "x-test-header=herald",
                ].merging(tracing) { $1 }
                configure(&configuration)
            } _: { live in
                try await body(receiver, fixture, live)
            }
        }
    }

    /// Every span's parent is in the trace, except the root's (the caller's span when it sent a
    /// traceparent): one tree, with nothing dangling.
    static func checkTree(_ spans: [Span], root: String) {
        let ids = Set(spans.map(\.spanID))
        for span in spans where span.parentSpanID != root {
            #expect(ids.contains(span.parentSpanID), "\(span) has a parent outside the trace: \(spans)")
        }
        #expect(spans.filter { $0.parentSpanID == root }.count == 1, "one root: \(spans)")
    }

    /// The chain of services from `span` up to the root.
    static func ancestry(_ span: Span, in spans: [Span]) -> [String] {
        var chain = [span.service]
        var current = span
        while let parent = spans.first(where: { $0.spanID == current.parentSpanID }), chain.count < 64 {
            chain.append(parent.service)
            current = parent
        }
        return chain
    }

    @Test(
        "a tutorial secure push is one trace: the caller's traceparent → edge → auth → registration, payload → dispatch → APNs"
    )
    func tutorialSecurePush() async throws {
        try await Self.withTracedStack { receiver, fixture, live in
            let token = apnsToken(7001)
            _ = try await live.register("alice", handle: token)

            // The caller's own trace: Herald's spans must join it.
            let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
            let callerSpan = "00f067aa0ba902b7"
            let sent = try await live.edge.request(
                "POST", "/api/notifications", authorization: EdgeClient.basic("alice"), bytes: nil,
                contentType: "application/json", headers: [("traceparent", "00-\(trace)-\(callerSpan)-01")])
            #expect(sent.status == 200, "\(sent.text)")

            // Each service exports on its own schedule: wait for a span of every service checked
            // below, not only dispatch's (registration's, then payload's, came after the others).
            let spans = try await receiver.waitForTrace(trace) { spans in
                spans.contains { $0.name == "apns request" } && spans.contains { $0.name == "outbox.claim" }
                    && spans.contains { $0.service == "herald-registration" && $0.name == "audience.page" }
                    && spans.contains { $0.service == "herald-auth" }
                    && spans.contains { $0.service == "herald-payload" }
                    && spans.contains { $0.parentSpanID == callerSpan }
            }
            let services = Set(spans.map(\.service))
            #expect(
                services.isSuperset(of: [
                    "herald-edge", "herald-auth", "herald-registration", "herald-payload", "herald-dispatch",
                ]), "services in the trace: \(services)")
            Self.checkTree(spans, root: callerSpan)
            let edge = try #require(spans.first { $0.parentSpanID == callerSpan }, "\(spans)")
            #expect(edge.service == "herald-edge" && edge.kind == 2, "\(edge)")
            #expect(edge.attributes["http.route"] as? String == "/api/notifications", "\(edge.attributes)")
            #expect(edge.attributes["http.response.status_code"] as? Int == 200, "\(edge.attributes)")

            // Each RPC is a client span in the caller and a server span in the callee, child of it.
            let authServer = try #require(
                spans.first { $0.service == "herald-auth" && $0.name == "herald.v1.AuthService/Authenticate" })
            let authClient = try #require(spans.first { $0.spanID == authServer.parentSpanID })
            #expect(authClient.service == "herald-edge" && authClient.kind == 3 && authServer.kind == 2)

            // The push to the APNs double, its status, below the dispatch span that made the send.
            let push = try #require(spans.first { $0.name == "apns request" })
            #expect(push.attributes["http.response.status_code"] as? Int == 200, "\(push.attributes)")
            #expect(
                Self.ancestry(push, in: spans).starts(with: [
                    "herald-dispatch", "herald-dispatch", "herald-dispatch", "herald-dispatch",
                ]), "\(Self.ancestry(push, in: spans))")
            #expect(Self.ancestry(push, in: spans).last == "herald-edge")
            #expect(spans.contains { $0.service == "herald-registration" && $0.name == "audience.page" })
            #expect(fixture.double.requests.contains { $0.path == "/3/device/\(token)" })
            // The exporter sends OTEL_EXPORTER_OTLP_HEADERS with each export.
            let raw = try String(contentsOfFile: receiver.spansPath, encoding: .utf8)
            #expect(raw.contains(#""x-test-header": "herald""#))
        }
    }

    @Test(
        "an NH template send over gRPC between the services is one trace, its TrackingId an attribute of the edge's span"
    )
    func nhTemplateSend() async throws {
        try await Self.withTracedStack(transport: .grpc) { receiver, fixture, live in
            let full = try await NHFixture.defaultHub(live)
            let auth = NHFixture.token(sr: NHFixture.root(live), full)
            let template = #"{\"aps\":{\"alert\":\"$(headline)\"}}"#
            let put = try await live.edge.request(
                "PUT", "/default/installations/traced-1", authorization: auth,
                body:
                    #"{"installationId":"traced-1","platform":"apns","pushChannel":"\#(apnsToken(7101))","tags":["news"],"templates":{"t":{"body":"\#(template)","tags":["lang_en"]}}}"#
            )
            #expect(put.status == 200, "\(put.text)")
            let send = try await NHFixture.post(
                live, "/default/messages", full, body: #"{"headline":"traced"}"#,
                headers: [
                    ("ServiceBusNotification-Format", "template"), ("ServiceBusNotification-Tags", "lang_en"),
                    ("TrackingId", "nh-track-42"),
                ])
            #expect(send.status == 201, "\(send.text)")

            // No traceparent: the edge starts the trace. Find it by the tracking id.
            var edge: Span?
            let deadline = ContinuousClock.now + .seconds(30)
            while edge == nil, ContinuousClock.now < deadline {
                edge = receiver.spans().first { $0.attributes["nh.tracking_id"] as? String == "nh-track-42" }
                if edge == nil { try await Task.sleep(for: .milliseconds(100)) }
            }
            let root = try #require(edge, "no edge span with the TrackingId")
            #expect(root.parentSpanID.isEmpty && root.service == "herald-edge")
            let spans = try await receiver.waitForTrace(root.traceID) { spans in
                spans.contains { $0.name == "apns request" }
                    && Set(spans.map(\.service)).isSuperset(of: [
                        "herald-auth", "herald-registration", "herald-dispatch",
                    ])
            }
            Self.checkTree(spans, root: "")
            let services = Set(spans.map(\.service))
            #expect(
                services.isSuperset(of: ["herald-edge", "herald-auth", "herald-registration", "herald-dispatch"]),
                "\(services)")
            #expect(spans.contains { $0.name == "herald.v1.AuthService/AuthorizeSas" && $0.service == "herald-auth" })
            let push = try #require(spans.first { $0.name == "apns request" })
            #expect(push.attributes["http.response.status_code"] as? Int == 200)
            #expect(Self.ancestry(push, in: spans).last == "herald-edge")
            #expect(
                fixture.double.requests.first { $0.path == "/3/device/\(apnsToken(7101))" }.map {
                    String(decoding: $0.body, as: UTF8.self)
                } == #"{"aps":{"alert":"traced"}}"#)
        }
    }

    @Test(
        "sampling half the traces: each request's trace is whole or absent, and a caller's unsampled trace records nothing"
    )
    func sampledTracesAreWhole() async throws {
        let tracing = ["OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"]
        try await Self.withTracedStack(tracing: tracing) { receiver, fixture, live in
            let token = apnsToken(7301)
            _ = try await live.register("alice", handle: token)
            let unsampled = "5bf92f3577b34da6a3ce929d0e0e4736"
            let sends = 16
            for n in 0...sends {
                // The last send comes with a caller's trace that is not sampled.
                let headers = n == sends ? [("traceparent", "00-\(unsampled)-00f067aa0ba902b7-00")] : []
                let sent = try await live.edge.request(
                    "POST", "/api/notifications", authorization: EdgeClient.basic("alice"), bytes: nil,
                    contentType: "application/json", headers: headers)
                #expect(sent.status == 200, "\(sent.text)")
            }
            let pushed = ContinuousClock.now + .seconds(30)
            while fixture.double.requests.filter({ $0.path == "/3/device/\(token)" }).count < sends + 1 {
                try #require(ContinuousClock.now < pushed, "not every push reached the APNs double in 30 s")
                try await Task.sleep(for: .milliseconds(50))
            }
            // Whole: each recorded trace ends in its push's span, under one edge span at the root.
            var traces: [String: [Span]] = [:]
            let deadline = ContinuousClock.now + .seconds(30)
            while true {
                traces = Dictionary(grouping: receiver.spans(), by: \.traceID)
                // Each trace's edge span has arrived, and each send's trace has its push.
                let complete = traces.values.allSatisfy { spans in
                    let edge = spans.first { $0.parentSpanID.isEmpty && $0.service == "herald-edge" }
                    guard let edge else { return false }
                    // Each service exports on its own schedule: every parent arrived, and a send's
                    // trace has every service's spans (registration's once came last in CI).
                    let ids = Set(spans.map(\.spanID))
                    guard spans.allSatisfy({ $0.parentSpanID.isEmpty || ids.contains($0.parentSpanID) }) else {
                        return false
                    }
                    return edge.attributes["http.route"] as? String != "/api/notifications"
                        || (spans.contains { $0.name == "apns request" }
                            && Set(spans.map(\.service)).isSuperset(of: [
                                "herald-edge", "herald-auth", "herald-registration", "herald-payload",
                                "herald-dispatch",
                            ]))
                }
                if complete || ContinuousClock.now >= deadline { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            // The registration before the sends is a trace of its own too (if sampled).
            let pushes = traces.values.filter { spans in spans.contains { $0.name == "apns request" } }
            #expect((1..<sends).contains(pushes.count), "\(pushes.count) of \(sends) traces recorded at 0.5")
            for spans in traces.values {
                Self.checkTree(spans, root: "")
                let root = spans.first { $0.parentSpanID.isEmpty }
                #expect(root?.service == "herald-edge", "a trace not started by the edge: \(spans)")
            }
            for spans in pushes {
                #expect(
                    Set(spans.map(\.service)).isSuperset(of: [
                        "herald-edge", "herald-auth", "herald-registration", "herald-payload", "herald-dispatch",
                    ]), "\(spans)")
            }
            #expect(traces[unsampled] == nil, "the caller's unsampled trace was recorded")
        }
    }

    @Test(
        "a caller's unsampled trace is named on each service's log lines, in the services that call no other too"
    )
    func passedOnTraceInLogs() async throws {
        let tracing = ["OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"]
        try await Self.withTracedStack(tracing: tracing) { configuration in
            configuration.logLevel = "debug"
            for service in Stack.services {
                configuration.extraArguments[service, default: []] += ["--log-format", "json"]
            }
        } _: { receiver, fixture, live in
            let token = apnsToken(7311)
            _ = try await live.register("alice", handle: token)
            let unsampled = "6bf92f3577b34da6a3ce929d0e0e4736"
            let requestID = "it-passed-on-" + UUID().uuidString.prefix(8).lowercased()
            let traced = [("traceparent", "00-\(unsampled)-00f067aa0ba902b7-00"), ("X-Request-Id", requestID)]
            // A send (edge, auth, payload, dispatch) and a new registration id (edge, auth, registration).
            let sent = try await live.edge.request(
                "POST", "/api/notifications", authorization: EdgeClient.basic("alice"), bytes: nil,
                contentType: "application/json", headers: traced)
            #expect(sent.status == 200, "\(sent.text)")
            let created = try await live.edge.request(
                "POST", "/api/register?handle=\(apnsToken(7312))", authorization: EdgeClient.basic("alice"),
                bytes: nil, contentType: "", headers: traced)
            #expect(created.status == 200, "\(created.text)")
            // Auth, payload and registration make no RPC (the trace is not bound to their tasks);
            // the edge and dispatch pass it on. Each one's line for the request names the trace.
            for service in ["edge", "auth", "payload", "dispatch", "registration"] {
                let named = try await eventually(.seconds(10)) {
                    ((try? live.jsonLogLines(service)) ?? []).contains {
                        $0["herald.request_id"] as? String == requestID && $0["trace_id"] as? String == unsampled
                    }
                }
                #expect(named, "no log line of herald-\(service) names the trace of request \(requestID)")
            }
            #expect(receiver.spans().allSatisfy { $0.traceID != unsampled }, "the unsampled trace was recorded")
        }
    }

    @Test("with OTEL_TRACES_EXPORTER=none the receiver gets nothing, even with an endpoint and a caller's traceparent")
    func offSendsNothing() async throws {
        try await LiveStack.withDirectory { folder in
            let receiver = try await Receiver(folder: folder)
            defer { receiver.stop() }
            try await LiveStack.with(runner: .processes, directory: folder + "/stack") { configuration in
                configuration.environment = [
                    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(receiver.port)", "OTEL_TRACES_EXPORTER": "none",
                    "OTEL_BSP_SCHEDULE_DELAY": "100",
                ]
            } _: { live in
                let token = apnsToken(7201)
                _ = try await live.register("alice", handle: token)
                let sent = try await live.edge.request(
                    "POST", "/api/notifications", authorization: EdgeClient.basic("alice"), bytes: nil,
                    contentType: "application/json",
                    headers: [("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")])
                #expect(sent.status == 200)
                _ = try await live.waitForInbox { $0.handle == token }
            }
            // The stack has stopped: an exporter would have flushed by now.
            #expect(receiver.spans().isEmpty)
        }
    }
}
