import Foundation
import HeraldModel
import HeraldTestSupport
import NIOCore
import NIOHPACK
import NIOHTTP1
import Testing

@testable import PushProviders

/// What a push service's answer means, per provider: the part of each sender that reads what came
/// back from outside (status, `reason`/`error` JSON, `Retry-After`). A provider's body is not
/// trusted to be what its docs say: odd JSON must classify, never trap.
@Suite("push services' answers", .watchedForStalls)
struct AnswerTests {
    static func answer(_ status: Int, _ body: String = "", headers: [(String, String)] = []) -> PushHTTP.Answer {
        PushHTTP.Answer(status: status, headers: HTTPHeaders(headers), body: Array(body.utf8))
    }

    @Test("APNs: dead tokens are unregistered with their timestamp, an expired provider token is retried")
    func apns() {
        #expect(APNsSender.classify(Self.answer(200)) == .delivered(status: 200))
        for reason in ["BadDeviceToken", "DeviceTokenNotForTopic"] {
            #expect(
                APNsSender.classify(Self.answer(400, #"{"reason":"\#(reason)"}"#))
                    == .unregistered(status: 400, reason: reason, since: 0))
        }
        #expect(
            APNsSender.classify(Self.answer(410, #"{"reason":"Unregistered","timestamp":1700000000000}"#))
                == .unregistered(status: 410, reason: "Unregistered", since: 1_700_000_000_000))
        #expect(
            APNsSender.classify(Self.answer(403, #"{"reason":"ExpiredProviderToken"}"#))
                == .retry(status: 403, reason: "ExpiredProviderToken", after: nil))
        #expect(
            APNsSender.classify(Self.answer(403, #"{"reason":"InvalidProviderToken"}"#))
                == .failed(status: 403, reason: "InvalidProviderToken"))
        #expect(
            APNsSender.classify(Self.answer(400, #"{"reason":"PayloadEmpty"}"#))
                == .failed(status: 400, reason: "PayloadEmpty"))
        #expect(
            APNsSender.classify(Self.answer(429, #"{"reason":"TooManyRequests"}"#, headers: [("retry-after", "30")]))
                == .retry(status: 429, reason: "TooManyRequests", after: .seconds(30)))
        #expect(
            APNsSender.classify(Self.answer(503, "<html>busy</html>"))
                == .retry(status: 503, reason: "HTTP 503", after: nil))
    }

    @Test(
        "APNs: a 410's timestamp that is not a number of milliseconds is 0, whatever its size or type",
        arguments: [
            "1e300", "-1e300", "18446744073709551616", "9223372036854775808", "-9223372036854775809", "\"soon\"",
            "true", "null", "[1]", "{}", "1.5", "-1",
        ])
    func apnsTimestamps(_ timestamp: String) {
        let result = APNsSender.classify(Self.answer(410, #"{"reason":"Unregistered","timestamp":\#(timestamp)}"#))
        guard case .unregistered(410, "Unregistered", let since) = result else {
            Issue.record("\(result)")
            return
        }
        // 0 is "unknown": every registration of the token goes. A wrapped negative time kept them all.
        #expect(since == 0 || since == 1, "\(timestamp) read as \(since)")
    }

    @Test("APNs: a reason that is not a string is the status, and a body that is not an object is no reason")
    func apnsOddBodies() {
        for body in [#"{"reason":7}"#, #"["BadDeviceToken"]"#, #""BadDeviceToken""#, "{", "\u{0}"] {
            #expect(APNsSender.classify(Self.answer(400, body)) == .failed(status: 400, reason: "HTTP 400"), "\(body)")
        }
    }

    @Test("FCM: UNREGISTERED from the details or the status, 401 retried, other errors by their code")
    func fcm() {
        let unregistered =
            #"{"error":{"code":404,"status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}"#
        #expect(
            FCMSender.classify(Self.answer(404, unregistered))
                == .unregistered(status: 404, reason: "UNREGISTERED", since: 0))
        #expect(
            FCMSender.classify(Self.answer(400, #"{"error":{"status":"UNREGISTERED"}}"#))
                == .unregistered(status: 400, reason: "UNREGISTERED", since: 0))
        #expect(
            FCMSender.classify(Self.answer(401, #"{"error":{"status":"UNAUTHENTICATED"}}"#))
                == .retry(status: 401, reason: "UNAUTHENTICATED", after: nil))
        #expect(
            FCMSender.classify(
                Self.answer(
                    400,
                    #"{"error":{"status":"INVALID_ARGUMENT","details":[{"errorCode":"INVALID_ARGUMENT"},{"x":1}]}}"#))
                == .failed(status: 400, reason: "INVALID_ARGUMENT"))
        #expect(
            FCMSender.classify(
                Self.answer(429, #"{"error":{"status":"RESOURCE_EXHAUSTED"}}"#, headers: [("Retry-After", "7")]))
                == .retry(status: 429, reason: "RESOURCE_EXHAUSTED", after: .seconds(7)))
        for body in [
            "", "[]", #"{"error":"bad"}"#, #"{"error":{"details":"x","status":5}}"#, #"{"error":{"details":[1,"a"]}}"#,
        ] {
            #expect(FCMSender.classify(Self.answer(400, body)) == .failed(status: 400, reason: "HTTP 400"), "\(body)")
            #expect(FCMSender.classify(Self.answer(500, body)) == .retry(status: 500, reason: "HTTP 500", after: nil))
        }
    }

    @Test("Retry-After: seconds or an HTTP date, capped at a day; anything else is no advice")
    func retryAfter() {
        #expect(PushHTTP.retryAfter("0") == .seconds(0))
        #expect(PushHTTP.retryAfter(" 45 ") == .seconds(45))
        #expect(PushHTTP.retryAfter("\(Int64.max)") == .seconds(86400))
        for junk in [nil, "", "-1", "1.5", "1e3", "99999999999999999999", "Tomorrow", "Sun, 06 Nov 1994 08:49:37"] {
            #expect(PushHTTP.retryAfter(junk) == nil, "\(junk ?? "nil")")
        }
        // A date in the past is "now", one far ahead a day.
        #expect(PushHTTP.retryAfter("Sun, 06 Nov 1994 08:49:37 GMT") == .zero)
        #expect(PushHTTP.retryAfter("Fri, 31 Dec 9999 23:59:59 GMT") == .seconds(86400))
    }

    @Test("a pooled batch's answers: no answer is a retry with its reason, 200 delivered, the rest the provider's")
    func pooledResults() {
        let answers: [HTTP2Answer] = [
            .failed(reason: "Timeout"), .answered(status: 200, headers: HPACKHeaders(), body: ByteBuffer()),
            .answered(
                status: 410, headers: HPACKHeaders([("content-type", "application/json")]),
                body: ByteBuffer(string: #"{"reason":"Unregistered","timestamp":5}"#)),
            .answered(status: 429, headers: HPACKHeaders([("retry-after", "3")]), body: ByteBuffer()),
        ]
        #expect(
            PushHTTP.results(answers, classify: APNsSender.classify) == [
                .retry(status: 0, reason: "Timeout", after: nil), .delivered(status: 200),
                .unregistered(status: 410, reason: "Unregistered", since: 5),
                .retry(status: 429, reason: "HTTP 429", after: .seconds(3)),
            ])
    }

    @Test("the common mapping: 2xx delivered, 429 and 5xx retried with their advice, anything else failed for good")
    func generic() {
        for status in [201, 204] {
            #expect(PushHTTP.generic(Self.answer(status), reason: "r") == .delivered(status: status))
        }
        for status in [429, 500, 502, 599] {
            #expect(
                PushHTTP.generic(Self.answer(status, headers: [("Retry-After", "2")]), reason: "r")
                    == .retry(status: status, reason: "r", after: .seconds(2)))
        }
        for status in [301, 400, 404, 413, 600] {
            #expect(PushHTTP.generic(Self.answer(status), reason: "r") == .failed(status: status, reason: "r"))
        }
    }

    @Test("an OAuth form: every byte outside RFC 3986's unreserved set is percent-encoded")
    func form() {
        #expect(
            PushHTTP.form([("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("a", "x y+z/&=é~._-")])
                == "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&a=x%20y%2Bz%2F%26%3D%C3%A9~._-")
    }
}
