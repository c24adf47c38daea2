package import Crypto
package import Foundation
package import HeraldModel
package import HeraldProto
package import HeraldRPC
package import HeraldStack
package import HeraldTestSupport
package import Testing

/// Notification Hubs as its clients reach a live stack: a hub's connection strings from
/// `herald hubs keys`, SAS tokens signed with them, sends, and a send's final outcome.
package enum NHFixture {
    /// `herald hubs add` and the hub's connection strings from `herald hubs keys`, Endpoint on the live edge.
    /// Adds hub `name` (unless `create` is false: "default" always exists) and returns its Full and
    /// Listen connection strings.
    package static func hub(_ name: String, _ live: LiveStack, create: Bool = true) async throws -> (
        full: String, listen: String
    ) {
        let herald = live.configuration.binDirectory + "/herald"
        let dir = ["--runtime-dir", live.configuration.runtimeDirectory]
        if create {
            let added = try await runProgram(herald, ["hubs", "add", name] + dir)
            try #require(added.status == 0, "\(added.error)")
        }
        let endpoint = "sb://" + live.edge.base.host! + ":\(live.edge.base.port!)/"
        let keys = try await runProgram(herald, ["hubs", "keys", name, "--endpoint", endpoint] + dir)
        try #require(keys.status == 0, "\(keys.error)")
        let strings = keys.output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter {
            $0.hasPrefix("Endpoint=")
        }
        let full = try #require(strings.first { $0.contains("SharedAccessKeyName=DefaultFullSharedAccessSignature;") })
        let listen = try #require(
            strings.first { $0.contains("SharedAccessKeyName=DefaultListenSharedAccessSignature;") })
        #expect(full.hasPrefix("Endpoint=\(endpoint);"))
        return (full, listen)
    }

    package static func secret(_ connectionString: String) -> (name: String, key: String) {
        var fields: [String: String] = [:]
        for part in connectionString.split(separator: ";") {
            guard let equals = part.firstIndex(of: "=") else { continue }
            fields[String(part[..<equals])] = String(part[part.index(after: equals)...])
        }
        return (fields["SharedAccessKeyName"]!, fields["SharedAccessKey"]!)
    }

    package static func encode(_ text: String, lower: Bool) -> String { SASTokens.encode(text, lower: lower) }

    /// A token with `sr` exactly as given, signed with the connection string's key.
    package static func token(
        sr: String, _ connectionString: String, expiry: Int64 = Int64(Date().timeIntervalSince1970) + 600
    )
        -> String
    {
        let (name, key) = secret(connectionString)
        return SASTokens.token(sr: sr, keyName: name, key: key, expiry: expiry)
    }

    /// Polls herald-dispatch until the send (an id, or a Location ending in one) is final.
    package static func finalOutcome(_ live: LiveStack, notification: String) async throws -> Outcome {
        let id = String(notification.split(separator: "/").last!.split(separator: "?").first!)
        return try await RPCClient.with(socketPath: live.configuration.socketPath("dispatch"), timeout: .seconds(30)) {
            client in
            let deadline = ContinuousClock.now + .seconds(20)
            var outcome = try await DispatchServiceClient(client).getOutcome(
                GetOutcomeRequest(notificationID: id, scope: .all))
            while [.enqueued, .processing, .scheduled].contains(outcome.state), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
                outcome = try await DispatchServiceClient(client).getOutcome(
                    GetOutcomeRequest(notificationID: id, scope: .all))
            }
            return outcome
        }
    }

    /// herald-dispatch's outcome of the send now, without waiting.
    package static func outcome(_ live: LiveStack, notification id: String) async throws -> Outcome {
        try await RPCClient.with(socketPath: live.configuration.socketPath("dispatch"), timeout: .seconds(30)) {
            try await DispatchServiceClient($0).getOutcome(GetOutcomeRequest(notificationID: id, scope: .all))
        }
    }

    package static func root(_ live: LiveStack) -> String {
        encode("http://\(live.edge.base.host!):\(live.edge.base.port!)/", lower: false)
    }

    /// The default hub's full-rights connection string (the deployment's credentials deliver it).
    package static func defaultHub(_ live: LiveStack) async throws -> String {
        let herald = live.configuration.binDirectory + "/herald"
        let endpoint = "sb://" + live.edge.base.host! + ":\(live.edge.base.port!)/"
        let keys = try await runProgram(
            herald,
            ["hubs", "keys", "default", "--endpoint", endpoint, "--runtime-dir", live.configuration.runtimeDirectory])
        try #require(keys.status == 0, "\(keys.error)")
        return try #require(
            keys.output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
                .first { $0.hasPrefix("Endpoint=") && $0.contains("DefaultFullSharedAccessSignature") })
    }

    package static func post(
        _ live: LiveStack, _ path: String, _ connection: String, body: String,
        contentType: String = "application/json;charset=utf-8",
        headers: [(String, String)]
    ) async throws -> EdgeClient.Reply {
        try await live.edge.request(
            "POST", path, authorization: NHFixture.token(sr: NHFixture.root(live), connection),
            bytes: Data(body.utf8), contentType: contentType, headers: headers)
    }

    package static func id(_ location: String?) throws -> String {
        let location = try #require(location)
        return String(location.split(separator: "/").last!.split(separator: "?").first!)
    }
}

/// What several stack suites share: the provider doubles around a stack, the secure-push
/// sequence, test certificates, and reading a Prometheus sample.
package enum StackFixture {
    package static let tokenPaths: Set<String> = ["/token", "/wns-token"]

    /// A stack whose dispatch sends every platform to `fixture`'s double; with `httpsEdge`, its
    /// edge serves HTTPS with the doubles' certificate.
    package static func withProviders(
        runner: LiveStack.Runner = .inProcess,
        logLevel: String = "info", retryBaseMs: Int = 200, extra: [String] = [], edge: [String] = [],
        httpsEdge: Bool = false,
        _ body: (ProviderFixture, LiveStack) async throws -> Void
    ) async throws {
        try await LiveStack.withDirectory { folder in
            let fixture = try await ProviderFixture.start(in: folder)
            defer { Task { await fixture.stop() } }
            try await LiveStack.with(runner: runner, directory: folder + "/stack") { configuration in
                configuration.logLevel = logLevel
                fixture.configure(&configuration, retryBaseMs: retryBaseMs)
                if httpsEdge { fixture.configureHTTPSEdge(&configuration) }
                configuration.extraArguments["dispatch", default: []] += extra
                configuration.extraArguments["edge", default: []] += edge
            } _: { live in
                try await body(fixture, live)
                #expect(fixture.violations.withLock { $0 } == [], "the doubles found rule violations")
            }
        }
    }

    package static func deliveries(_ live: LiveStack, _ id: String) async throws -> [DeliveryRecord] {
        try await RPCClient.with(
            socketPath: live.configuration.socketPath("dispatch"), transport: live.configuration.rpcTransport,
            timeout: .testRPC
        ) {
            try await DispatchServiceClient($0).listDeliveries(
                ListDeliveriesRequest(notificationID: id, limit: 1000, scope: .all)
            )
            .deliveries
        }
    }

    /// The value of the first sample of `name` whose labels contain each of `labels`; 0 when absent.
    package static func value(_ text: String, _ name: String, _ labels: [String]) -> Double {
        for line in text.split(separator: "\n") where line.hasPrefix(name + "{") || line.hasPrefix(name + " ") {
            guard labels.allSatisfy({ line.contains($0) }),
                let number = line.split(separator: " ").last.flatMap({ Double($0) })
            else { continue }
            return number
        }
        return 0
    }

    /// The iOS client's secure-push sequence against a running stack (users alice and bob).
    package static func secureSequence(_ live: LiveStack) async throws {
        let edge = live.edge
        let token = apnsToken(1)

        // Register as the iOS client does: POST for an id, then PUT the installation.
        let created = try await edge.request("POST", "/api/register?handle=\(token)", as: "alice")
        #expect(created.status == 200)
        let id = try #require(
            try JSONSerialization.jsonObject(with: created.body, options: .fragmentsAllowed) as? String)
        #expect(id.hasPrefix("r-"))
        let put = try await edge.request(
            "PUT", "/api/register/\(id)", as: "alice",
            body: #"{"Platform":"apns","Handle":"\#(token)","Tags":["news"]}"#)
        #expect(put.status == 200)
        #expect(put.body.isEmpty)

        // Send: the push carries only the id.
        let sent = try await edge.request("POST", "/api/notifications", as: "alice")
        #expect(sent.status == 200)
        let entries = try await live.waitForInbox { $0.handle == token }
        try #require(entries.count == 1)
        let push = entries[0]
        let text = String(decoding: push.payload, as: UTF8.self)
        let secureID = try #require(text.firstMatch(of: /"secureId":"(\d+)"/)?.1).description
        #expect(text == #"{"aps":{"content-available":1},"secureId":"\#(secureID)"}"#)
        #expect(!text.contains("Secure confirmation"))
        #expect(push.platform == .apns)
        #expect(push.registrationID == id)
        #expect(push.headers.contains(Header(name: "apns-push-type", value: "background")))
        #expect(push.headers.contains(Header(name: "apns-priority", value: "5")))

        // The device fetches the payload: unread the first time, read after.
        let first = try await edge.request("GET", "/api/notifications/\(secureID)", as: "alice")
        #expect(first.status == 200)
        #expect(first.header("Content-Type")?.hasPrefix("application/json") == true)
        let body = try first.json()
        #expect(body["Id"] as? Int == Int(secureID))
        #expect(body["Payload"] as? String == "Secure confirmation.")
        #expect(body["Read"] as? Bool == false)
        let second = try await edge.request("GET", "/api/notifications/\(secureID)", as: "alice")
        #expect(try second.json()["Read"] as? Bool == true)

        // Only the recipient, and only with credentials.
        let bob = try await edge.request("GET", "/api/notifications/\(secureID)", as: "bob")
        #expect(bob.status == 404)
        let anonymous = try await edge.request("GET", "/api/notifications/\(secureID)")
        #expect(anonymous.status == 401)
        #expect(anonymous.header("WWW-Authenticate") == #"Basic realm="herald""#)
        #expect(try anonymous.json()["error"] as? String == "unauthorized")

        // An unknown platform is a 400 with a JSON error naming the accepted ones.
        let unknown = try await edge.request(
            "PUT", "/api/register/\(id)", as: "alice", body: #"{"Platform":"blackberry","Handle":"x"}"#)
        #expect(unknown.status == 400)
        #expect((try unknown.json()["message"] as? String)?.contains("apns") == true)
    }

    /// The devices every send reaches: an outcome must count exactly this many successes.
    package static let audience = 3

    /// A throw-away CA and one certificate for 127.0.0.1 (server and client use), made with openssl.
    package static func makeCertificates(in folder: String) async throws -> StackTLS {
        let openssl = try #require(which("openssl"), "openssl is needed to make test certificates")
        func run(_ arguments: [String]) async throws {
            let result = try await runProgram(openssl, arguments)
            try #require(result.status == 0, "openssl \(arguments.first ?? ""): \(result.error)")
        }
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try await run(
            ["req", "-x509"] + ec + [
                "-keyout", "\(folder)/ca.key", "-out", "\(folder)/ca.pem", "-days", "2", "-subj", "/CN=herald-test-ca",
            ])
        try await run(
            ["req"] + ec + [
                "-keyout", "\(folder)/service.key", "-out", "\(folder)/service.csr", "-subj", "/CN=herald-test",
            ])
        try """
        basicConstraints=CA:FALSE
        subjectAltName=IP:127.0.0.1,DNS:localhost
        extendedKeyUsage=serverAuth,clientAuth

        """.write(toFile: "\(folder)/service.ext", atomically: true, encoding: .utf8)
        try await run([
            "x509", "-req", "-in", "\(folder)/service.csr", "-CA", "\(folder)/ca.pem", "-CAkey", "\(folder)/ca.key",
            "-CAcreateserial", "-out", "\(folder)/service.pem", "-days", "2", "-extfile", "\(folder)/service.ext",
        ])
        return StackTLS(certificate: "\(folder)/service.pem", key: "\(folder)/service.key", ca: "\(folder)/ca.pem")
    }
}
