import Foundation
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// Herald's RPCs and deploy files, checked with tools that are not Herald's own.
/// Their subjects are the wire protocols and the deploy files, not the stores: they run in the
/// SQLite pass only.
@Suite(
    "independent clients and deploy files", .serialized, .timeLimit(.minutes(3)), .storeIndependent, .watchedForStalls)
struct ExternalClientTests {
    /// Runs one of Tests/python's checks against a live stack and returns the JSON object it printed.
    static func pythonCheck(_ script: String, _ live: LiveStack) async throws -> [String: Any] {
        let python = try #require(which("python3"), "python3 is required (scripts/test.sh installs it)")
        let result = try await runProgram(
            python,
            [
                packageRoot.appendingPathComponent("Tests/python/\(script)").path,
                live.configuration.runtimeDirectory,
                packageRoot.appendingPathComponent("proto").path,
            ])
        try #require(result.status == 0, "\(script) failed: \(result.error)")
        return try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any])
    }

    @Test("Python grpcio calls every service over unix: sockets with stubs generated from proto/")
    func pythonGrpcio() async throws {
        try await LiveStack.with(runner: .processes) { live in
            let answers = try await Self.pythonCheck("grpc_check.py", live)
            #expect(
                answers["health"] as? [String: String]
                    == ["auth": "SERVING", "registration": "SERVING", "payload": "SERVING", "dispatch": "SERVING"])
            #expect(answers["authenticate"] as? String == "carol")
            #expect(answers["authenticate_bad"] as? String == "UNAUTHENTICATED")
            #expect(answers["create_user_again"] as? String == "ALREADY_EXISTS")
            #expect(answers["users"] as? [String] == ["py-user"])
            #expect(answers["bearer"] as? String == "bearer")
            let registrations = try #require(answers["registrations"] as? [[String: Any]])
            #expect(registrations.count == 1)
            #expect(registrations.first?["platform"] as? String == "PLATFORM_FCM")
            #expect(registrations.first?["tags"] as? [String] == ["sports", "username:carol"])
            #expect((answers["audience"] as? [String])?.count == 1)
            #expect(answers["upsert_foreign"] as? String == "NOT_FOUND")
            #expect((answers["payload"] as? [String: Any])?["content"] as? String == "from python")
            #expect(answers["payload_foreign"] as? String == "NOT_FOUND")
            #expect(answers["send_state"] as? String == "OUTCOME_STATE_ENQUEUED")
            #expect(answers["outcome_unscoped"] as? String == "PERMISSION_DENIED")
            #expect(answers["final_state"] as? String == "OUTCOME_STATE_COMPLETED")
            #expect(answers["delivered"] as? Int == 1)
            #expect(answers["inbox_payloads"] as? [String] == [#"{"data":{"hello":"python"}}"#])
            #expect(answers["send_empty"] as? String == "INVALID_ARGUMENT")
            #expect(answers["devices"] as? [[String]] == [["sports", "username:carol"]])
            #expect(answers["devices_bad_tag"] as? String == "INVALID_ARGUMENT")
            #expect(answers["sends"] as? [Bool] == [true] && answers["stats_delivered"] as? Int == 1)
            #expect(answers["sends_unscoped"] as? String == "PERMISSION_DENIED")
            #expect(
                answers["queue_pending"] as? Int == 0 && answers["queue_unscoped"] as? String == "PERMISSION_DENIED")
            #expect(answers["inbox_newest"] as? Bool == true)
        }
    }

    @Test("a Python client with only protobuf and sockets calls every service over the lean protocol")
    func pythonLeanClient() async throws {
        try await LiveStack.with(runner: .processes) { live in
            let answers = try await Self.pythonCheck("lean_check.py", live)
            #expect(
                answers["health"] as? [String: String]
                    == ["auth": "SERVING", "registration": "SERVING", "payload": "SERVING", "dispatch": "SERVING"])
            #expect(answers["authenticate"] as? String == "gus")
            #expect(answers["authenticate_bad"] as? String == "UNAUTHENTICATED")
            #expect(answers["unknown_method"] as? String == "UNIMPLEMENTED")
            #expect(answers["payload"] as? String == "over lean")
        }
    }

    @Test("docker-compose.yml is valid: health checks, start order by health, read-only roots, one published port")
    func composeFile() async throws {
        let compose = try #require(which("docker-compose"), "docker-compose is required (scripts/test.sh installs it)")
        let file = packageRoot.appendingPathComponent("docker-compose.yml").path
        let result = try await runProgram(compose, ["-f", file, "config", "-q"])
        #expect(result.status == 0, "\(result.error)")
        // The rendered file, with anchors and merges resolved.
        let rendered = try await runProgram(compose, ["-f", file, "config"]).output
        func count(_ text: String) -> Int { rendered.components(separatedBy: text).count - 1 }
        #expect(count("healthcheck:") == 5)
        #expect(count("read_only: true") == 5)
        #expect(count("condition: service_healthy") == 5)
        #expect(count("ports:") == 1)
        #expect(count("stop_grace_period: 15s") == 5)
        #expect(!rendered.contains("TEST_MODE"), "test-mode belongs to docker-compose.test.yml only")
        #expect(rendered.contains("published: 8080"), "HERALD_EDGE_PORT unset: the edge is on 8080")
    }

    @Test(
        "docker-compose.test.yml turns test-mode on everywhere, waits for start order only, and takes the port and user from the environment"
    )
    func composeTestOverlay() async throws {
        let compose = try #require(which("docker-compose"), "docker-compose is required (scripts/test.sh installs it)")
        let files = [
            "-f", packageRoot.appendingPathComponent("docker-compose.yml").path, "-f",
            packageRoot.appendingPathComponent("docker-compose.test.yml").path,
        ]
        let rendered = try await runProgram(
            compose, files + ["config"],
            environment: ["HERALD_EDGE_PORT": "127.0.0.1:18080", "HERALD_TEST_USER": "qa-bot"])
        #expect(rendered.status == 0, "\(rendered.error)")
        func count(_ text: String) -> Int { rendered.output.components(separatedBy: text).count - 1 }
        #expect(count("HERALD_TEST_MODE: 'true'") + count(#"HERALD_TEST_MODE: "true""#) == 5, "\(rendered.output)")
        #expect(count("condition: service_healthy") == 0)
        #expect(count("condition: service_started") == 5)
        #expect(count("HERALD_TEST_USER: qa-bot") == 1)
        #expect(count("HERALD_PROVIDER: inbox") == 1)
        #expect(rendered.output.contains("127.0.0.1:18080:8080"), "\(rendered.output)")
    }

    @Test("the Kubernetes manifests pass kubernetes-validate --strict")
    func kubernetesManifests() async throws {
        let validate = try #require(
            which("kubernetes-validate"), "kubernetes-validate is required (scripts/test.sh installs it)")
        let folder = packageRoot.appendingPathComponent("services/k8s")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".yaml") }
            .sorted()
        try #require(!files.isEmpty)
        let result = try await runProgram(validate, ["--strict"] + files.map { folder.appendingPathComponent($0).path })
        #expect(result.status == 0, "\(result.output)\(result.error)")
        #expect(result.output.contains("statefulset/herald"), "\(result.output)")
    }
}

/// Examples/send-push, a separate package that adds Herald's `HeraldClient` product the way another
/// team's service would, run against a live stack. scripts/test.sh builds it and sets
/// HERALD_EXAMPLE_SEND_PUSH to its binary.
@Suite("the published Swift client", .serialized, .timeLimit(.minutes(3)), .storeIndependent, .watchedForStalls)
struct PublishedClientTests {
    static let binary = ProcessInfo.processInfo.environment["HERALD_EXAMPLE_SEND_PUSH"]

    @Test(
        "Examples/send-push sends a push through HeraldClient, over both transports, and follows it to COMPLETED",
        .enabled(if: binary != nil, "set HERALD_EXAMPLE_SEND_PUSH (scripts/test.sh builds Examples/send-push)"))
    func examplePackageSendsAPush() async throws {
        let binary = try #require(Self.binary)
        try await LiveStack.with(runner: .processes) { live in
            _ = try await live.register("dora", platform: "apns", handle: String(repeating: "d0", count: 32))
            _ = try await live.register("dora", platform: "fcm", handle: "fcm-dora")
            for transport in ["lean", "grpc"] {
                let result = try await runProgram(
                    binary,
                    [
                        "--runtime-dir", live.configuration.runtimeDirectory, "--user", "dora",
                        "--message", "über \"quoted\" \(transport)", "--transport", transport,
                    ])
                #expect(result.status == 0, "send-push failed: \(result.error)")
                #expect(result.output.contains("OUTCOME_STATE_COMPLETED"), "\(result.output)")
                #expect(result.output.contains("apns: 1 delivered"), "\(result.output)")
                let delivered = try await live.waitForInbox(count: 2) { entry in
                    String(decoding: entry.payload, as: UTF8.self).contains("über \\\"quoted\\\" \(transport)")
                }
                #expect(delivered.count == 2)
            }
        }
    }
}
