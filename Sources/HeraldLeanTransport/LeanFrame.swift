import HeraldModel
import HeraldRPCCore
public import NIOCore

/// Constants of the lean protocol (docs/rpc-protocol.md).
public enum LeanProtocol {
    public static let version: UInt8 = 1
    /// Preface byte 5: what this peer accepts beyond version 1's frames. Peers that predate it send
    /// 0 and ignore it, so it needs no new version.
    public static let features: UInt8 = Feature.endTrailers
    /// "HRLD", the version, the features, two reserved zero bytes.
    public static let preface: [UInt8] = [0x48, 0x52, 0x4C, 0x44, version, features, 0, 0]

    /// Feature bits of the preface.
    public enum Feature {
        /// END frames may carry trailing metadata (flag ``LeanFrame/endTrailersFlag``).
        public static let endTrailers: UInt8 = 0x01
    }
    /// Default largest frame: the largest message plus room for the request head.
    public static let defaultMaxFrameBytes = RPCLimits.maxMessageBytes + 1024
    /// Bytes of a frame after its length field, before the payload: type, flags, call id.
    static let headerBytes = 6
}

/// A connection-level violation of the protocol: the connection cannot go on.
public struct LeanProtocolError: Error, Hashable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// One frame of the lean protocol.
public struct LeanFrame: Sendable, Equatable {
    public enum Kind: UInt8, Sendable {
        case request = 1
        case message = 2
        case end = 3
        case cancel = 4
        case window = 5
        case goaway = 6
        case error = 7
    }

    public var kind: Kind
    /// Zero, except ``endTrailersFlag`` on an END frame to a peer that accepts trailers.
    public var flags: UInt8
    public var callID: UInt32
    public var payload: ByteBuffer

    /// On END: the payload is `status u8, message_len u16, message, meta_count u16, entries` (as a
    /// REQUEST's metadata) instead of `status u8, message`.
    public static let endTrailersFlag: UInt8 = 0x01

    public init(_ kind: Kind, flags: UInt8 = 0, callID: UInt32, payload: ByteBuffer = ByteBuffer()) {
        self.kind = kind
        self.flags = flags
        self.callID = callID
        self.payload = payload
    }

    /// Takes one whole frame off the front of `buffer`, or returns nil (consuming nothing) when more
    /// bytes are needed. Throws on a frame over `maxFrameBytes` or malformed header fields, before
    /// reading or buffering its payload.
    public static func parse(_ buffer: inout ByteBuffer, maxFrameBytes: Int) throws -> LeanFrame? {
        guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self) else { return nil }
        guard length >= LeanProtocol.headerBytes else {
            throw LeanProtocolError("frame length \(length) is shorter than the frame header")
        }
        guard length <= maxFrameBytes else {
            throw LeanProtocolError("frame of \(length) bytes exceeds the limit of \(maxFrameBytes) bytes")
        }
        guard buffer.readableBytes >= 4 + Int(length) else { return nil }
        let start = buffer.readerIndex + 4
        // Present: the length was checked against the readable bytes above.
        guard let rawKind = buffer.getInteger(at: start, as: UInt8.self),
            let flags = buffer.getInteger(at: start + 1, as: UInt8.self),
            let callID = buffer.getInteger(at: start + 2, as: UInt32.self),
            let payload = buffer.getSlice(
                at: start + LeanProtocol.headerBytes, length: Int(length) - LeanProtocol.headerBytes)
        else { throw LeanProtocolError("frame of \(length) bytes is shorter than its header") }
        guard let kind = Kind(rawValue: rawKind) else { throw LeanProtocolError("unknown frame type \(rawKind)") }
        guard flags == 0 || (kind == .end && flags == endTrailersFlag) else {
            throw LeanProtocolError("reserved frame flags must be zero")
        }
        buffer.moveReaderIndex(forwardBy: 4 + Int(length))
        return LeanFrame(kind, flags: flags, callID: callID, payload: payload)
    }

    /// Appends the frame's wire form to `buffer`.
    public func write(to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt32(LeanProtocol.headerBytes + payload.readableBytes))
        buffer.writeInteger(kind.rawValue)
        buffer.writeInteger(flags)
        buffer.writeInteger(callID)
        var payload = payload
        buffer.writeBuffer(&payload)
    }

    /// The wire length of the frame, length field included.
    public var wireBytes: Int { 4 + LeanProtocol.headerBytes + payload.readableBytes }

    // MARK: typed payloads

    /// An END or ERROR frame. `metadata` (END only, and only to a peer whose preface has
    /// ``LeanProtocol/Feature/endTrailers``) travels as trailers.
    public static func status(
        _ kind: Kind, callID: UInt32, code: StatusCode, message: String, metadata: [String: String] = [:]
    ) -> LeanFrame {
        var payload = ByteBuffer()
        payload.writeInteger(UInt8(code.rawValue))
        guard kind == .end, !metadata.isEmpty else {
            payload.writeString(message)
            return LeanFrame(kind, callID: callID, payload: payload)
        }
        // Strings here are at most 65535 bytes: the message is cut there, longer entries are left out.
        let short = LeanRequest.isShortString
        // Cut at 65,000 bytes: a split character decodes as one U+FFFD (3 bytes), still short.
        let cut = String(decoding: message.utf8.prefix(65_000), as: UTF8.self)
        LeanRequest.writeShortString(fitting: short(cut) ? cut : "", to: &payload)
        let entries = metadata.filter { short($0.key) && short($0.value) }.sorted { $0.key < $1.key }.prefix(
            Int(UInt16.max))
        payload.writeInteger(UInt16(entries.count))
        for (key, value) in entries {
            LeanRequest.writeShortString(fitting: key, to: &payload)
            LeanRequest.writeShortString(fitting: value, to: &payload)
        }
        return LeanFrame(kind, flags: endTrailersFlag, callID: callID, payload: payload)
    }

    /// The status of an END or ERROR frame, with an END's trailers.
    public func status() throws -> (code: StatusCode, message: String, metadata: [String: String]) {
        var payload = self.payload
        guard let raw = payload.readInteger(as: UInt8.self) else {
            throw LeanProtocolError("status frame without a status")
        }
        let code = StatusCode(rawValue: Int(raw)) ?? .unknown
        guard flags & Self.endTrailersFlag != 0 else {
            return (code, payload.readString(length: payload.readableBytes) ?? "", [:])
        }
        let message = try LeanRequest.readShortString(&payload, "END message")
        guard let count = payload.readInteger(as: UInt16.self) else {
            throw LeanProtocolError("END trailers without a count")
        }
        var metadata: [String: String] = [:]
        for _ in 0..<count {
            metadata[try LeanRequest.readShortString(&payload, "trailer key")] = try LeanRequest.readShortString(
                &payload, "trailer value")
        }
        return (code, message, metadata)
    }

    /// A WINDOW frame.
    public static func window(callID: UInt32, credits: UInt32) -> LeanFrame {
        var payload = ByteBuffer()
        payload.writeInteger(credits)
        return LeanFrame(.window, callID: callID, payload: payload)
    }

    /// The credits of a WINDOW frame.
    public func credits() throws -> UInt32 {
        guard payload.readableBytes == 4, let credits = payload.getInteger(at: payload.readerIndex, as: UInt32.self)
        else {
            throw LeanProtocolError("WINDOW frame payload must be 4 bytes")
        }
        return credits
    }
}

/// The head of a REQUEST frame, and its message.
public struct LeanRequest: Sendable, Equatable {
    public var timeoutMilliseconds: UInt32
    public var window: UInt32
    public var method: String
    public var metadata: [LeanMetadataEntry]
    public var message: ByteBuffer

    public init(
        timeoutMilliseconds: UInt32, window: UInt32, method: String, metadata: [LeanMetadataEntry], message: ByteBuffer
    ) {
        self.timeoutMilliseconds = timeoutMilliseconds
        self.window = window
        self.method = method
        self.metadata = metadata
        self.message = message
    }

    public func frame(callID: UInt32) throws -> LeanFrame {
        var payload = ByteBuffer()
        // Sized once: a head that outgrew its buffer (a `traceparent` is 70 bytes with its key)
        // was copied into a new one.
        var metadataBytes = 0
        for entry in metadata { metadataBytes &+= 4 &+ entry.key.utf8.count &+ entry.value.utf8.count }
        payload.reserveCapacity(16 &+ method.utf8.count &+ metadataBytes &+ message.readableBytes)
        payload.writeInteger(timeoutMilliseconds)
        payload.writeInteger(window)
        try Self.writeShortString(method, to: &payload)
        guard metadata.count <= UInt16.max else { throw LeanProtocolError("too many metadata entries") }
        payload.writeInteger(UInt16(metadata.count))
        for entry in metadata {
            try Self.writeShortString(entry.key, to: &payload)
            try Self.writeShortString(entry.value, to: &payload)
        }
        var message = self.message
        payload.writeBuffer(&message)
        return LeanFrame(.request, callID: callID, payload: payload)
    }

    public static func parse(_ frame: LeanFrame) throws -> LeanRequest {
        var payload = frame.payload
        guard let timeout = payload.readInteger(as: UInt32.self), let window = payload.readInteger(as: UInt32.self)
        else {
            throw LeanProtocolError("REQUEST frame too short")
        }
        let method = try readShortString(&payload, "method")
        guard let count = payload.readInteger(as: UInt16.self) else {
            throw LeanProtocolError("REQUEST frame without metadata count")
        }
        var metadata: [LeanMetadataEntry] = []
        metadata.reserveCapacity(Int(count))
        for _ in 0..<count {
            metadata.append(
                LeanMetadataEntry(
                    key: try readShortString(&payload, "metadata key"),
                    value: try readShortString(&payload, "metadata value")))
        }
        return LeanRequest(
            timeoutMilliseconds: timeout, window: window, method: method, metadata: metadata, message: payload)
    }

    /// Whether `string` fits a short string's 16-bit length.
    static func isShortString(_ string: String) -> Bool { string.utf8.count <= Int(UInt16.max) }

    static func writeShortString(_ string: String, to buffer: inout ByteBuffer) throws {
        guard isShortString(string) else {
            throw LeanProtocolError("string of \(string.utf8.count) bytes is too long for the request head")
        }
        writeShortString(fitting: string, to: &buffer)
    }

    /// Writes `string`, which the caller made sure ``isShortString(_:)``.
    static func writeShortString(fitting string: String, to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt16(truncatingIfNeeded: string.utf8.count))
        buffer.writeString(string)
    }

    /// Read in place, without copying the bytes out first, and validated without the standard
    /// library's unspecialised initialiser when ASCII (``validatedUTF8(_:)``): method names and
    /// metadata (request ids, `traceparent`) are.
    static func readShortString(_ buffer: inout ByteBuffer, _ what: String) throws -> String {
        guard let length = buffer.readInteger(as: UInt16.self).map(Int.init), buffer.readableBytes >= length else {
            throw LeanProtocolError("frame truncated in the \(what)")
        }
        let string = buffer.withUnsafeReadableBytes { raw in
            validatedUTF8(UnsafeRawBufferPointer(rebasing: raw[..<length]))
        }
        guard let string else { throw LeanProtocolError("\(what) is not UTF-8") }
        buffer.moveReaderIndex(forwardBy: length)
        return string
    }
}

/// One metadata entry of a request.
public struct LeanMetadataEntry: Sendable, Hashable {
    public var key: String
    public var value: String
    public init(key: String, value: String) {
        self.key = key
        self.value = value
    }
}

/// Fired once per connection when the peer's preface has been read: what the peer accepts.
struct LeanPeerPreface {
    var features: UInt8
    var acceptsEndTrailers: Bool { features & LeanProtocol.Feature.endTrailers != 0 }
}

/// Splits the byte stream into frames, after checking the peer's preface.
///
/// Written here rather than with swift-nio-extras' `LengthFieldBasedFrameDecoder`: the connection
/// starts with a fixed preface, and an oversized frame must be refused with a clear message before
/// its payload is buffered.
final class LeanFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = LeanFrame
    private var prefaceChecked = false
    private let maxFrameBytes: Int

    init(maxFrameBytes: Int) {
        self.maxFrameBytes = maxFrameBytes
    }

    func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        if !prefaceChecked {
            guard let preface = buffer.readBytes(length: LeanProtocol.preface.count) else { return .needMoreData }
            guard preface.prefix(4).elementsEqual(LeanProtocol.preface.prefix(4)) else {
                throw LeanProtocolError("not a Herald lean-protocol peer (bad preface)")
            }
            guard preface[4] == LeanProtocol.version else {
                throw LeanProtocolError(
                    "unsupported protocol version \(preface[4]); this peer speaks \(LeanProtocol.version)")
            }
            prefaceChecked = true
            context.fireUserInboundEventTriggered(LeanPeerPreface(features: preface[5]))
        }
        guard let frame = try LeanFrame.parse(&buffer, maxFrameBytes: maxFrameBytes) else { return .needMoreData }
        context.fireChannelRead(wrapInboundOut(frame))
        return .continue
    }

    func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }
}

/// Sends this side's preface as soon as the connection is open.
final class LeanPrefaceWriter: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { sendPreface(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        sendPreface(context)
        context.fireChannelActive()
    }

    private var sent = false

    private func sendPreface(_ context: ChannelHandlerContext) {
        guard !sent else { return }
        sent = true
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(bytes: LeanProtocol.preface)), promise: nil)
    }
}

extension LeanFrame {
    /// The frame as bytes ready for the socket. Frames are encoded by whoever sends them (often a
    /// handler's task, off the event loop), so the pipeline needs no encoder.
    package func encoded() -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(wireBytes)
        write(to: &buffer)
        return buffer
    }
}
