// The fuzz targets over the code that parses what clients send and builds what providers get.
// herald-fuzz (built only with HERALD_FUZZ=1, with -sanitize=fuzzer,address; scripts/fuzz.sh) runs
// them under libFuzzer, the target chosen by HERALD_FUZZ_TARGET; FuzzCorpusTests replays every
// seed of Tests/FuzzCorpus through them in the ordinary test run. The targets:
//
//   proto         protobuf-c decode of every request message; what decodes re-encodes and decodes equal
//   lean          the lean protocol's frame and REQUEST-head decoders; what parses re-encodes byte for byte
//   json          the edge's JSON bodies: PUT api/register's object, notify-users' message string
//   subscription  a browser's PushSubscription (the Web Push handle)
//   payloads      the APNs/FCM/Web Push JSON and WNS XML built around any text: always parse, text intact
//   template      NH's template parser and renderer (a body, NUL, the value every property gets):
//                 a JSON template always renders valid JSON, a well-formed XML one well-formed XML
//   sas           a SharedAccessSignature header: parsed, then verified against a key at extreme
//                 clocks; never traps, and nothing but the key's own signature passes
//   installation  an installation PUT body, NUL, a JSON-Patch, NUL, a property value: what parses
//                 (or is patched) is valid as a whole, reads back equal, and each template renders
//                 through dispatch's renderer without trapping
//   nhheaders     NH send headers (name: value lines), NUL, a body: the edge's header mapping
//   batch         a $batch Content-Type, NUL, a body: the multipart parser
//   tagexpr       a tag expression: its canonical text parses to the same tree, and SQLite's
//                 audience for it equals the in-memory evaluation over a fixed set of devices
//   router        one HTTP request through the edge's whole router over fake services
//                 (RouterFuzz.swift): no trap, and no answer 500
//   http1, http2, credentials
//                 the libraries Herald hands outside bytes to, at its own entry points
//                 (LibraryFuzz.swift)
//
// Any property that does not hold traps, which libFuzzer reports as a crash with the input saved.
import AuthService
import DispatchService
import Edge
import Foundation
import GRDB
import HTTPTypes
import HeraldLeanTransport
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import NIOCore
import NotificationHubs
import PushProviders
import RegistrationService
import Synchronization

#if canImport(FoundationXML)
    import FoundationXML
#endif

package enum FuzzTarget: String, CaseIterable, Sendable {
    case proto, lean, json, subscription, payloads, template, sas, installation, nhheaders, batch, tagexpr,
        nhregistration, router, http1, http2, credentials

    /// One input through this target; a property that does not hold traps.
    package func run(_ bytes: [UInt8]) {
        switch self {
        case .proto: Self.proto(bytes)
        case .lean: Self.lean(bytes)
        case .json: Self.json(bytes)
        case .subscription: Self.subscription(bytes)
        case .payloads: Self.payloads(bytes)
        case .template: Self.template(bytes)
        case .sas: Self.sas(bytes)
        case .installation: Self.installation(bytes)
        case .nhheaders: Self.nhHeaders(bytes)
        case .batch: Self.batch(bytes)
        case .tagexpr: Self.tagExpression(bytes)
        case .nhregistration: Self.nhRegistration(bytes)
        case .router: Self.router(bytes)
        case .http1: Self.http1(bytes)
        case .http2: Self.http2(bytes)
        case .credentials: Self.credentials(bytes)
        }
    }

    /// Every request message of every service, chosen by the input's first byte.
    static let requests: [@Sendable ([UInt8]) -> Void] = [
        roundTrip(HealthCheckRequest.self), roundTrip(AuthenticateRequest.self), roundTrip(IssueTokenRequest.self),
        roundTrip(RevokeTokenRequest.self), roundTrip(RevokeUserTokensRequest.self), roundTrip(CreateUserRequest.self),
        roundTrip(SetPasswordRequest.self), roundTrip(DeleteUserRequest.self), roundTrip(ListUsersRequest.self),
        roundTrip(UserExistsRequest.self), roundTrip(SendRequest.self), roundTrip(ListDeliveriesRequest.self),
        roundTrip(GetOutcomeRequest.self), roundTrip(ListInboxRequest.self), roundTrip(StorePayloadRequest.self),
        roundTrip(FetchPayloadRequest.self), roundTrip(DeletePayloadRequest.self),
        roundTrip(CreateRegistrationIdRequest.self),
        roundTrip(UpsertRegistrationRequest.self), roundTrip(DeleteRegistrationRequest.self),
        roundTrip(ListRegistrationsRequest.self), roundTrip(StreamAudienceRequest.self),
        roundTrip(RemoveHandleRequest.self), roundTrip(PutHubRegistrationRequest.self),
        roundTrip(GetHubRegistrationRequest.self), roundTrip(DeleteHubRegistrationRequest.self),
        roundTrip(ListHubRegistrationsRequest.self),
    ]

    static func proto(_ bytes: [UInt8]) {
        guard let selector = bytes.first else { return }
        requests[Int(selector) % requests.count](Array(bytes.dropFirst()))
    }

    static func roundTrip<M: HeraldMessage>(_ type: M.Type) -> @Sendable ([UInt8]) -> Void {
        { bytes in roundTrip(M.self, bytes) }
    }

    static func roundTrip<M: HeraldMessage>(_ type: M.Type, _ bytes: [UInt8]) {
        guard let message = try? M(serializedBytes: bytes) else { return }
        guard let encoded: [UInt8] = try? message.serializedBytes() else {
            fatalError("\(M.protoName) decoded but does not encode")
        }
        guard let again = try? M(serializedBytes: encoded), again == message else {
            fatalError("\(M.protoName) does not survive a round trip")
        }
    }

    static func lean(_ bytes: [UInt8]) {
        var buffer = ByteBuffer(bytes: bytes)
        while true {
            let before = buffer
            guard let frame = try? LeanFrame.parse(&buffer, maxFrameBytes: LeanProtocol.defaultMaxFrameBytes) else {
                return
            }
            let consumed = before.readableBytes - buffer.readableBytes
            let original = Array(before.readableBytesView.prefix(consumed))
            guard Array(frame.encoded().readableBytesView) == original else {
                fatalError("a frame does not re-encode to its bytes")
            }
            if frame.kind == .request, let request = try? LeanRequest.parse(frame) {
                guard let reframed = try? request.frame(callID: frame.callID), reframed == frame else {
                    fatalError("a REQUEST head does not re-encode to its frame")
                }
            }
        }
    }

    static func json(_ bytes: [UInt8]) {
        let data = Data(bytes)
        // The flat reader takes only bodies JSONSerialization reads to the same fields.
        if FlatReader.read(data) != nil,
            (try? RegistrationBody.parse(data)) != (try? RegistrationBody.parseWithFoundation(data))
        {
            fatalError("the flat reader and JSONSerialization read a registration body differently")
        }
        _ = try? EdgeHTTP.messageText(data)
    }

    static func subscription(_ bytes: [UInt8]) {
        guard let subscription = try? WebPushSubscription(handle: String(decoding: bytes, as: UTF8.self)) else {
            return
        }
        guard subscription.endpoint.scheme == "https", subscription.p256dh.count == 65, subscription.auth.count == 16,
            URLRules.isVisibleASCII(subscription.endpoint.absoluteString)
        else { fatalError("a PushSubscription was accepted with a bad field") }
    }

    static func payloads(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard !text.utf8.contains(0) else { return }  // the edge refuses NUL before building payloads
        for payload in NativePayloads.alert(text) + NativePayloads.rich(id: 7, message: text, richType: text) {
            let body = Data(payload.body)
            switch payload.platform {
            case .wns:
                let parser = XMLParser(data: body)
                guard parser.parse() else {
                    fatalError("WNS XML does not parse: \(parser.parserError.map { "\($0)" } ?? "")")
                }
            default:
                guard let object = try? JSONSerialization.jsonObject(with: body) else {
                    fatalError("a JSON payload does not parse")
                }
                guard contains(object, text) else {
                    fatalError("the text did not survive in the \(payload.platform.name) payload")
                }
            }
        }
    }

    static func template(_ bytes: [UInt8]) {
        let parts = bytes.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
        let body = String(decoding: parts[0], as: UTF8.self)
        let value = parts.count > 1 ? String(decoding: parts[1], as: UTF8.self) : "v"
        guard let template = try? PushTemplate(body) else { return }
        let names = ["p", "q", "a", "b", "x", "m", "message", "title", "count", "headline"]
        let rendered = Data(template.render(PushTemplate.Properties(names.map { ($0, value) })).utf8)
        switch template.format {
        case .json:
            guard (try? JSONSerialization.jsonObject(with: rendered, options: .fragmentsAllowed)) != nil else {
                fatalError("a JSON template rendered to invalid JSON")
            }
        case .xml:
            // Only a well-formed template promises well-formed output (the scanner is lenient).
            guard XMLParser(data: Data(body.utf8)).parse() else { return }
            let parser = XMLParser(data: rendered)
            guard parser.parse() else {
                fatalError("an XML template rendered to malformed XML: \(parser.parserError.map { "\($0)" } ?? "")")
            }
        }
    }

    /// The parts of an input separated by NUL bytes, as text, at most `count` of them.
    static func parts(_ bytes: [UInt8], _ count: Int) -> [String] {
        bytes.split(separator: 0, maxSplits: count - 1, omittingEmptySubsequences: false).map {
            String(decoding: $0, as: UTF8.self)
        }
    }

    static func sas(_ bytes: [UInt8]) {
        let header = String(decoding: bytes, as: UTF8.self)
        _ = SASAudience.normalized(header)
        _ = SASAudience.covers(header.lowercased(), resource: header)
        guard let token = try? SharedAccessSignature.parse(header) else { return }
        guard token.expiry >= 0, token.expiry <= TimeValue.maxUnixSeconds,
            token.keyName.utf8.count <= SharedAccessSignature.maxKeyNameLength
        else {
            fatalError(
                "parse let through a token out of bounds: se \(token.expiry), skn of \(token.keyName.utf8.count) bytes")
        }
        for now in [Int64.min, 0, 1_700_000_000_000, Int64.max] {
            for key in [nil, "k1"] as [String?] {
                if (try? SharedAccessSignature.verify(
                    token, primary: key, secondary: key, now: now, resource: "h/hub/installations/x")) != nil
                {
                    fatalError("a token the fuzzer made verified")
                }
            }
        }
    }

    static let hosts = RegistrationRules.PushHosts(wns: ["notify.windows.com"], webPush: ["fcm.googleapis.com"])

    static func installation(_ bytes: [UInt8]) {
        let parts = parts(bytes, 3)
        let body = Array(parts[0].utf8)
        let direct = try? Installation.parse(body, id: "dev-1", hosts: hosts)
        // The RPC's way: read at the edge, sent as a message, taken and validated where it is stored.
        let viaMessage = (try? Installation.read(body, id: "dev-1")).flatMap { read in
            (try? Installation(request: read.message, id: "dev-1")).flatMap { taken in
                (try? taken.validate(hosts: hosts)).map { taken }
            }
        }
        guard direct == viaMessage else { fatalError("NH's JSON is taken differently through the RPC's message") }
        guard let installation = direct else { return }
        guard Installation(answer: installation.message) == installation else {
            fatalError("an installation's message reads back different")
        }
        check(installation, value: parts.count > 2 ? parts[2] : "v")
        guard parts.count > 1 else { return }
        var patched = installation
        guard (try? patched.apply(patch: Array(parts[1].utf8), hosts: hosts)) != nil else {
            guard patched == installation else { fatalError("a refused patch changed the installation") }
            var typed = installation
            if let operations = try? Installation.patchOperations(Array(parts[1].utf8)),
                (try? typed.apply(operations: operations, hosts: hosts)) != nil
            {
                fatalError("a patch refused as JSON is taken as operations")
            }
            return
        }
        var typed = installation
        guard let operations = try? Installation.patchOperations(Array(parts[1].utf8)),
            (try? typed.apply(operations: operations, hosts: hosts)) != nil, typed == patched
        else { fatalError("a patch taken as JSON is not taken the same as operations") }
        check(patched, value: parts.count > 2 ? parts[2] : "v")
    }

    /// What every stored installation must be: valid as a whole, equal once read back, and each
    /// template rendered by dispatch either refused or made, never a trap.
    static func check(_ installation: Installation, value: String) {
        do {
            try installation.validate(hosts: hosts)
        } catch {
            fatalError("an installation was taken that does not validate: \(error)")
        }
        guard let json = try? installation.json(), let back = try? Installation.stored(json) else {
            fatalError("an installation does not read back")
        }
        guard back == installation else { fatalError("an installation reads back different") }
        let properties = PushTemplate.Properties(["m", "msg", "message", "x", "exp", "p"].map { ($0, value) })
        for (name, template) in installation.templates {
            _ = try? TemplateAudience.render(
                Installation.Template.message(wireJSON: template.wireJSON), name: name,
                platform: installation.platform, properties, sentAt: 1_700_000_000_000)
        }
    }

    /// An NH registration body (Atom XML): refused, or taken; a taken one, once stored, is written
    /// as well-formed XML that reads back as the same registration.
    static func nhRegistration(_ bytes: [UInt8]) {
        guard var parsed = try? NHRegistrationXML.parse(bytes) else { return }
        parsed.registrationID = "r1"
        guard let stored = try? HubRegistrationRules.validated(parsed, hosts: hosts, trusted: true) else { return }
        let entry = NHRegistrationXML.entry(stored, url: "https://h/hub/registrations/r1")
        let parser = XMLParser(data: Data(entry.utf8))
        guard parser.parse() else {
            fatalError("a registration's entry is not well-formed XML: \(parser.parserError.map { "\($0)" } ?? "")")
        }
        guard var again = try? NHRegistrationXML.parse(Array(entry.utf8)) else {
            fatalError("a registration's own entry does not parse")
        }
        again.registrationID = "r1"
        guard let back = try? HubRegistrationRules.validated(again, hosts: hosts, trusted: true), back == stored else {
            fatalError("a registration reads back different from its entry")
        }
    }

    static func nhHeaders(_ bytes: [UInt8]) {
        let parts = parts(bytes, 2)
        var fields = HTTPFields()
        for line in parts[0].split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":"), let name = HTTPField.Name(String(line[..<colon])) else {
                continue
            }
            fields.append(
                HTTPField(
                    name: name, value: String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)))
        }
        let body = Data((parts.count > 1 ? parts[1] : "").utf8)
        if let payload = try? NotificationHubsRoutes.nhPayload(fields, body: body) {
            guard (0...PushLimits.maxTTLSeconds).contains(payload.ttlSeconds) else {
                fatalError("an NH send got ttl \(payload.ttlSeconds) s")
            }
            _ = try? PlatformRules.prepare(payload, sentAt: 1_700_000_000_000)
            _ = try? NotificationHubsRoutes.directHandle(fields, platform: payload.platform)
        }
    }

    static func batch(_ bytes: [UInt8]) {
        let split = bytes.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
        let contentType = String(decoding: split[0], as: UTF8.self)
        _ = try? NHBatch.parse(contentType: contentType, body: split.count > 1 ? Array(split[1]) : [])
    }

    /// Devices with every subset of four tags, in one in-memory registration store.
    static let alphabet = ["a", "b", "c", "d"]
    static let audienceStore: (store: SQLRegistrationStore, tags: [String: Set<String>]) = {
        blocking {
            // The harness's own set-up: a failure here is the harness's, so it stops the run.
            do {
                let store = try await SQLRegistrationStore(
                    db: SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration)))
                var tags: [String: Set<String>] = [:]
                for mask in 0..<16 {
                    let chosen = alphabet.enumerated().filter { mask & (1 << $0.offset) != 0 }.map(\.element)
                    let handle = String(format: "%064x", mask + 1)
                    let id = try await store.createID(owner: "u", handle: handle)
                    try await store.upsert(owner: "u", id: id, platform: .apns, handle: handle, tags: chosen)
                    tags[id] = Set(chosen + ["username:u"])
                }
                return (store, tags)
            } catch {
                fatalError("fuzz harness: cannot build the audience store: \(error)")
            }
        }
    }()

    static func tagExpression(_ bytes: [UInt8]) {
        guard let expression = try? TagExpression(String(decoding: bytes, as: UTF8.self)) else { return }
        guard let again = try? TagExpression(expression.description), again.root == expression.root else {
            fatalError("the canonical text \(expression.description) does not parse to the same expression")
        }
        let (store, tags) = audienceStore
        let found: Result<[Registration], any Error> = blocking {
            do {
                return .success(
                    try await store.audience(expression: expression, platform: .apns, after: "", limit: 100))
            } catch {
                return .failure(error)
            }
        }
        switch found {
        case .failure(let error):
            fatalError("SQLite refused a valid expression \(expression): \(error)")
        case .success(let devices):
            let expected = Set(tags.filter { expression.matches($0.value) }.keys)
            guard Set(devices.map(\.registrationID)) == expected else {
                fatalError("SQL and memory disagree on \(expression)")
            }
        }
    }

    /// Runs `body` to completion from the fuzzer's synchronous callback.
    static func blocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
        let done = DispatchSemaphore(value: 0)
        let box = Mutex<T?>(nil)
        Task {
            let value = await body()
            box.withLock { $0 = value }
            done.signal()
        }
        done.wait()
        guard let value = box.withLock({ $0 }) else { fatalError("fuzz harness: the task signalled without a value") }
        return value
    }

    /// Whether `text` is one of the string values anywhere in `object` (alert text or "From …" forms).
    static func contains(_ object: Any, _ text: String) -> Bool {
        switch object {
        case let string as String: string == text || string.hasSuffix(text)
        case let dictionary as [String: Any]: dictionary.values.contains { contains($0, text) }
        case let array as [Any]: array.contains { contains($0, text) }
        default: false
        }
    }
}
