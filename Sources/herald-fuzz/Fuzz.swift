import Foundation
import HeraldModel
import HeraldProto
import NIOCore

// libFuzzer targets over the code that parses what clients send and builds what providers get.
// Built only with HERALD_FUZZ=1 (Package.swift), with -sanitize=fuzzer,address; scripts/fuzz.sh
// builds and runs them. One binary, the target chosen by HERALD_FUZZ_TARGET:
//
//   proto         protobuf-c decode of every request message; what decodes re-encodes and decodes equal
//   lean          the lean protocol's frame and REQUEST-head decoders; what parses re-encodes byte for byte
//   json          the edge's JSON bodies: PUT api/register's object, notify-users' message string
//   subscription  a browser's PushSubscription (the Web Push handle)
//   payloads      the APNs/FCM/Web Push JSON and WNS XML built around any text: always parse, text intact
//   template      NH's template parser and renderer (a body, NUL, the value every property gets):
//                 a JSON template always renders valid JSON, a well-formed XML one well-formed XML
//
// Any property that does not hold traps, which libFuzzer reports as a crash with the input saved.
@testable import Edge
@testable import HeraldRPC

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// libFuzzer's driver (libclang_rt.fuzzer, linked by `-sanitize=fuzzer`).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

/// The entry point SwiftPM links an executable target through (`main` is defined as
/// `<module>_main`); it hands the command line to libFuzzer's driver, as libFuzzer's own `main`
/// would.
@_cdecl("herald_fuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in fuzzOneInput(data, size) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    switch FuzzTarget.current {
    case .proto: FuzzTarget.proto(bytes)
    case .lean: FuzzTarget.lean(bytes)
    case .json: FuzzTarget.json(bytes)
    case .subscription: FuzzTarget.subscription(bytes)
    case .payloads: FuzzTarget.payloads(bytes)
    case .template: FuzzTarget.template(bytes)
    }
    return 0
}

enum FuzzTarget: String, CaseIterable {
    case proto, lean, json, subscription, payloads, template

    static let current: FuzzTarget = {
        let name = ProcessInfo.processInfo.environment["HERALD_FUZZ_TARGET"] ?? ""
        guard let target = FuzzTarget(rawValue: name) else {
            fatalError("set HERALD_FUZZ_TARGET to one of \(allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return target
    }()

    /// Every request message of every service, chosen by the input's first byte.
    static let requests: [@Sendable ([UInt8]) -> Void] = [
        roundTrip(HealthCheckRequest.self), roundTrip(AuthenticateRequest.self), roundTrip(IssueTokenRequest.self),
        roundTrip(RevokeTokenRequest.self), roundTrip(RevokeUserTokensRequest.self), roundTrip(CreateUserRequest.self),
        roundTrip(SetPasswordRequest.self), roundTrip(DeleteUserRequest.self), roundTrip(ListUsersRequest.self),
        roundTrip(UserExistsRequest.self), roundTrip(SendRequest.self), roundTrip(ListDeliveriesRequest.self),
        roundTrip(GetOutcomeRequest.self), roundTrip(ListInboxRequest.self), roundTrip(StorePayloadRequest.self),
        roundTrip(FetchPayloadRequest.self), roundTrip(DeletePayloadRequest.self), roundTrip(CreateRegistrationIdRequest.self),
        roundTrip(UpsertRegistrationRequest.self), roundTrip(DeleteRegistrationRequest.self),
        roundTrip(ListRegistrationsRequest.self), roundTrip(StreamAudienceRequest.self), roundTrip(RemoveHandleRequest.self),
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
            guard Array(frame.encoded().readableBytesView) == original else { fatalError("a frame does not re-encode to its bytes") }
            if frame.kind == .request, let request = try? LeanRequest.parse(frame) {
                guard let reframed = try? request.frame(callID: frame.callID), reframed == frame else {
                    fatalError("a REQUEST head does not re-encode to its frame")
                }
            }
        }
    }

    static func json(_ bytes: [UInt8]) {
        let data = Data(bytes)
        _ = try? RegistrationBody.parse(data)
        _ = try? EdgeRoutes.messageText(data)
    }

    static func subscription(_ bytes: [UInt8]) {
        guard let subscription = try? WebPushSubscription(handle: String(decoding: bytes, as: UTF8.self)) else { return }
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
                guard parser.parse() else { fatalError("WNS XML does not parse: \(parser.parserError.map { "\($0)" } ?? "")") }
            default:
                guard let object = try? JSONSerialization.jsonObject(with: body) else { fatalError("a JSON payload does not parse") }
                guard contains(object, text) else { fatalError("the text did not survive in the \(payload.platform.name) payload") }
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
