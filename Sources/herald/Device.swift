import ArgumentParser
import AsyncHTTPClient
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import NIOCore

/// `herald device`: the tutorial's app, played from a terminal against a running stack.
///
/// It logs in (a bearer token from `POST /v1/auth/token`), registers a fake but well-formed device
/// handle the way the iOS app does (`POST api/register?handle=`, then `PUT api/register/{id}`,
/// asking for a new id on 410), then watches the inbox provider for pushes to that handle. A rich
/// push's content is fetched to a file, a secure push's payload is fetched and printed, an alert is
/// printed: what the seeds' `didReceiveRemoteNotification` code does.
struct Device: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Play the tutorial's device: log in, register, and show the pushes that arrive.")

    @OptionGroup var stack: StackOptions
    @Option(help: "The user to log in as.")
    var user: String
    @Option(help: "The password. Default: HERALD_PASSWORD, else prompted (or one line of standard input).")
    var password: String?
    @Option(help: "apns, fcm or wns.")
    var platform = "apns"
    @Option(help: "Tags to register besides the server's username:<user>.")
    var tag: [String] = []
    @Option(help: "The edge's base URL. Default: the one the stack wrote to <dir>/run/edge.url.")
    var url: String?
    @Option(help: "Where fetched rich content is saved.")
    var out = "."
    @Option(help: "Stop after this many pushes (0: run until Ctrl-C).")
    var count = 0
    @Option(help: "Give up after this many seconds without the pushes asked for (0: never).")
    var timeout = 0

    func run() async throws {
        let base = try edgeURL()
        let secret = try password ?? ProcessInfo.processInfo.environment["HERALD_PASSWORD"] ?? readPassword()
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        do {
            try await play(http: http, base: base, secret: secret)
            try await http.shutdown()
        } catch {
            try? await http.shutdown()
            throw error
        }
    }

    private func play(http: HTTPClient, base: String, secret: String) async throws {
        let deadline = timeout > 0 ? ContinuousClock.now + .seconds(timeout) : nil
        // Log in.
        let basic = "Basic " + Data("\(user):\(secret)".utf8).base64EncodedString()
        let login = try await send(http, "POST", base + "/v1/auth/token", authorization: basic)
        guard login.status == 200,
            let token = (try? JSONSerialization.jsonObject(with: login.body) as? [String: Any])?["access_token"]
                as? String
        else { throw CLIError(message: "login failed: \(login.status) \(login.text)") }
        let bearer = "Bearer \(token)"
        say("logged in as \(user)")

        // Register, as the iOS app's RegisterClient does.
        let handle = Self.fakeHandle(platform)
        var registrationID = ""
        for attempt in 0..<2 {
            let created = try await send(
                http, "POST", base + "/api/register?handle=\(handle.urlQueryEscaped)", authorization: bearer)
            guard created.status == 200 else {
                throw CLIError(message: "POST api/register: \(created.status) \(created.text)")
            }
            registrationID = created.text.trimmingCharacters(in: CharacterSet(charactersIn: "\"\n "))
            let body = try jsonData(["Platform": platform, "Handle": handle, "Tags": tag])
            let put = try await send(
                http, "PUT", base + "/api/register/\(registrationID)", authorization: bearer, body: body)
            if put.status == 200 { break }
            if put.status == 410, attempt == 0 { continue }  // the id expired: ask for a new one
            throw CLIError(message: "PUT api/register: \(put.status) \(put.text)")
        }
        say("registered \(platform) device \(registrationID) (handle \(handle.prefix(16))…); waiting for pushes")

        // Watch the inbox for this handle.
        var after: Int64 = 0
        var received = 0
        try await withService(.dispatch, stack) { client in
            while count == 0 || received < count {
                if let deadline, ContinuousClock.now >= deadline {
                    throw CLIError(message: "timed out after \(timeout) s with \(received) of \(count) pushes")
                }
                let entries = try await DispatchServiceClient(client).listInbox(
                    ListInboxRequest(afterSequence: after, limit: 100, handle: handle)
                ).entries
                for entry in entries {
                    after = max(after, entry.sequence)
                    try await show(entry, http: http, base: base, authorization: bearer)
                    received += 1
                }
                if entries.isEmpty { try await Task.sleep(for: .milliseconds(200)) }
            }
        }
    }

    /// What the app does with one push.
    private func show(_ entry: InboxEntry, http: HTTPClient, base: String, authorization: String) async throws {
        let push = Push(entry)
        switch push {
        case .secure(let id):
            let reply = try await send(http, "GET", base + "/api/notifications/\(id)", authorization: authorization)
            guard reply.status == 200, let body = try? JSONSerialization.jsonObject(with: reply.body) as? [String: Any]
            else {
                say("secure push \(id): fetch failed: \(reply.status) \(reply.text)")
                return
            }
            say("secure push \(id): \(body["Payload"] as? String ?? "?")")
        case .rich(let id, let message, let type):
            let reply = try await send(http, "GET", base + "/api/notifications/\(id)", authorization: authorization)
            guard reply.status == 200 else {
                say("rich push \(id): fetch failed: \(reply.status) \(reply.text)")
                return
            }
            let contentType = reply.header("content-type") ?? "application/octet-stream"
            let file = URL(fileURLWithPath: out).appendingPathComponent("rich-\(id).\(Self.fileExtension(contentType))")
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
            try reply.body.write(to: file)
            say(
                "rich push \(id) (\(type)): \(message) → saved \(file.path) (\(reply.body.count) bytes, \(contentType))"
            )
        case .alert(let text):
            say("alert: \(text)")
        case .unknown(let text):
            say("push: \(text)")
        }
    }

    private func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    private func edgeURL() throws -> String {
        if let url { return url.hasSuffix("/") ? String(url.dropLast()) : url }
        let file = stack.runtime.path + "/edge.url"
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
            throw ValidationError("no \(file): is the stack running (herald up --dir \(stack.folder))? Or give --url")
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    struct Reply {
        var status: Int
        var headers: [(String, String)]
        var body: Data
        var text: String { String(decoding: body, as: UTF8.self) }
        func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name }?.1 }
    }

    private func send(_ http: HTTPClient, _ method: String, _ url: String, authorization: String, body: Data? = nil)
        async throws -> Reply
    {
        var request = HTTPClientRequest(url: url)
        request.method = .RAW(value: method)
        request.headers.add(name: "Authorization", value: authorization)
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response = try await http.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        return Reply(
            status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) },
            body: Data(bytes.readableBytesView))
    }

    /// A handle of the right shape for each platform, random so runs do not collide.
    static func fakeHandle(_ platform: String) -> String {
        let hex = randomHex(words: 4)
        switch platform.lowercased() {
        case "fcm", "gcm", "fcmv1": return "herald-device-" + hex
        case "wns": return "https://db5.notify.windows.com/?token=" + hex
        default: return hex
        }
    }

    static func fileExtension(_ contentType: String) -> String {
        let type =
            contentType.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        return [
            "image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp", "text/plain": "txt",
        ][type]
            ?? "bin"
    }
}

/// A push as the tutorial's apps read it: `secureId`, `richId` (+ `richMessage`, `richType`), or
/// an alert, in APNs or FCM JSON; WNS raw pushes carry the id alone (fetched as secure or rich by
/// the answer's type), toasts the text.
enum Push {
    case secure(String)
    case rich(id: String, message: String, type: String)
    case alert(String)
    case unknown(String)

    init(_ entry: InboxEntry) {
        let text = String(decoding: entry.payload, as: UTF8.self)
        if entry.platform == .wns {
            if let match = text.firstMatch(of: /<text id="1">(.*)<\/text>/) {
                self = .alert(
                    String(match.1).replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(
                        of: "&gt;", with: ">"
                    )
                    .replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&apos;", with: "'")
                    .replacingOccurrences(of: "&amp;", with: "&"))
            } else if Int64(text) != nil {
                self = .secure(text)  // raw: the id; fetched the same way
            } else {
                self = .unknown(text)
            }
            return
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(entry.payload)) as? [String: Any] else {
            self = .unknown(text)
            return
        }
        let fields = (object["data"] as? [String: Any]) ?? object
        if let id = fields["secureId"] as? String {
            self = .secure(id)
        } else if let id = fields["richId"] as? String {
            self = .rich(
                id: id, message: fields["richMessage"] as? String ?? "", type: fields["richType"] as? String ?? "")
        } else if let alert = (object["aps"] as? [String: Any])?["alert"] as? String {
            self = .alert(alert)
        } else if let message = fields["message"] as? String {
            self = .alert(message)
        } else {
            self = .unknown(text)
        }
    }
}

extension String {
    var urlQueryEscaped: String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return addingPercentEncoding(withAllowedCharacters: allowed) ?? self
    }
}
