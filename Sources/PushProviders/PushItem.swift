import HeraldModel
public import HeraldProto

/// What one push carries, shared by every delivery of one platform of one send (or, in a template
/// send, of one distinct template rendered: its `variant`).
public struct OutboxPayload: Sendable, Hashable {
    public var platform: Platform
    /// How it is delivered; each sender turns it into its provider's headers.
    public var options: DeliveryOptions
    public var body: [UInt8]
    /// 0 for a native send; a template send numbers its distinct rendered templates from 0.
    public var variant: Int = 0

    public init(platform: Platform, options: DeliveryOptions = DeliveryOptions(), body: [UInt8], variant: Int = 0) {
        self.platform = platform
        self.options = options
        self.body = body
        self.variant = variant
    }

    /// Which payload of a send a delivery carries.
    public struct Key: Hashable, Sendable {
        public var platform: Platform
        public var variant: Int

        package init(platform: Platform, variant: Int) {
            self.platform = platform
            self.variant = variant
        }

        /// A native send's payload for `platform`.
        public static func native(_ platform: Platform) -> Key { Key(platform: platform, variant: 0) }
    }

    public var key: Key { Key(platform: platform, variant: variant) }
}

/// How one push is delivered besides its body: resolved once per send by ``PlatformRules`` (every
/// default filled in, so senders never guess), stored as columns of `outbox_payload`, and turned
/// into headers by each sender (`APNsSender.headers(for:)` and its siblings).
public struct DeliveryOptions: Sendable, Hashable {
    /// APNs `apns-push-type` (alert, background); WNS `X-WNS-Type` (wns/toast, wns/raw…); empty
    /// for FCM and Web Push.
    public var pushType: String
    /// APNs `apns-priority` (10 or 5); Web Push urgency (10 high, 5 normal, 1 low); 0 elsewhere.
    public var priority: Int32
    /// `Content-Type` of the body as the provider gets it; empty for Web Push (always aes128gcm).
    public var contentType: String
    /// When the push service may stop trying, Unix epoch milliseconds; 0: its default.
    public var expiresAtUnixMs: Int64
    /// APNs `apns-collapse-id`, FCM `collapse_key`, WNS `X-WNS-Tag`, Web Push `Topic`; empty: none.
    public var collapseID: String

    public init(
        pushType: String = "", priority: Int32 = 0, contentType: String = "", expiresAtUnixMs: Int64 = 0,
        collapseID: String = ""
    ) {
        self.pushType = pushType
        self.priority = priority
        self.contentType = contentType
        self.expiresAtUnixMs = expiresAtUnixMs
        self.collapseID = collapseID
    }

    /// Whole seconds the push service may still keep trying at `now` (Unix ms), never negative;
    /// nil without an expiry.
    public func secondsLeft(now: Int64) -> Int64? {
        expiresAtUnixMs > 0 ? max(0, expiresAtUnixMs / 1000 - now / 1000) : nil
    }
}

/// One delivery a worker claimed: a payload for one registration, on its `attempt`-th try.
public struct PushItem: Sendable {
    public var sequence: Int64
    public var notificationID: String
    public var registrationID: String
    public var platform: Platform
    public var handle: String
    /// Fixed when the send was committed and reused by every attempt (APNs apns-id).
    public var messageID: String
    /// 1 for the first attempt.
    public var attempt: Int
    /// When the retry window ends, Unix ms.
    public var giveUpAt: Int64
    public var payload: OutboxPayload
    /// The send's hub: whose credentials deliver it.
    public var hub: String = Names.defaultHub

    package init(
        sequence: Int64, notificationID: String, registrationID: String, platform: Platform, handle: String,
        messageID: String, attempt: Int, giveUpAt: Int64, payload: OutboxPayload, hub: String = Names.defaultHub
    ) {
        self.sequence = sequence
        self.notificationID = notificationID
        self.registrationID = registrationID
        self.platform = platform
        self.handle = handle
        self.messageID = messageID
        self.attempt = attempt
        self.giveUpAt = giveUpAt
        self.payload = payload
        self.hub = hub
    }
}

/// What a push service said about one delivery.
public enum PushResult: Sendable, Equatable {
    /// Accepted.
    case delivered(status: Int)
    /// Try again later (429, 5xx, timeout, lost connection), not before `after` when the service said so.
    case retry(status: Int, reason: String, after: Duration?)
    /// Refused for good; never retried.
    case failed(status: Int, reason: String)
    /// The handle is dead: failed for good, and registration must delete it. `since`: when it
    /// stopped being valid (Unix ms, APNs' timestamp), 0 when unknown.
    case unregistered(status: Int, reason: String, since: Int64)
}
