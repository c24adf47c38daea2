import Crypto
import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import JWTKit
import Testing

@testable import PushProviders

@Suite("senders: provider tokens, Web Push encryption, FCM messages", .watchedForStalls)
struct SenderTests {
    @Test("the APNs token is renewed once 50 minutes old, and never within 20 minutes even when refused")
    func providerTokenWindow() async throws {
        let clock = ManualClock()
        let key = P256.Signing.PrivateKey()
        let token = try await APNsProviderToken(
            keyPEM: key.pemRepresentation, keyID: "KEY1234567", teamID: "TEAM123456", now: { clock.now / 1000 })
        let first = try await token.token()
        #expect(await token.signed == 1)

        clock.advance(seconds: 19 * 60)
        #expect(try await token.token() == first)
        await token.refused(first)  // ExpiredProviderToken at 19 minutes: too young to renew.
        #expect(try await token.token() == first)
        #expect(await token.signed == 1)

        clock.advance(seconds: 1 * 60)  // 20 minutes: a refusal may renew now.
        await token.refused(first)
        let second = try await token.token()
        #expect(second != first)
        #expect(await token.signed == 2)

        clock.advance(seconds: 49 * 60)  // 49 minutes old: still in its window.
        #expect(try await token.token() == second)
        clock.advance(seconds: 1 * 60)  // 50 minutes: renewed before Apple's hour runs out.
        let third = try await token.token()
        #expect(third != second)
        #expect(await token.signed == 3)

        // The claims: kid, iss, iat = the injected clock; the signature verifies with the key.
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: try ES256PublicKey(pem: key.publicKey.pemRepresentation))
        let claims = try await keys.verify(third, as: APNsProviderToken.Claims.self)
        #expect(claims.iss == "TEAM123456" && claims.iat == clock.now / 1000)
        let header = try #require(third.split(separator: ".").first.flatMap { Base64URL.decode(String($0)) })
        let fields = try #require(try JSONSerialization.jsonObject(with: Data(header)) as? [String: String])
        #expect(fields["kid"] == "KEY1234567" && fields["alg"] == "ES256")
    }

    @Test("aes128gcm matches RFC 8291's worked example byte for byte")
    func webPushVector() throws {
        func d(_ text: String) -> [UInt8] { Base64URL.decode(text)! }
        let sender = try P256.KeyAgreement.PrivateKey(
            rawRepresentation: d("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"))
        let body = try WebPushEncryption.encrypt(
            Array("When I grow up, I want to be a watermelon".utf8),
            p256dh: d("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"),
            auth: d("BTBZMqHH6r4Tts7J_aSIgg"), senderKey: sender, salt: d("DGv6ra1nlYgDCS1FRnbzlw"))
        #expect(
            Base64URL.encode(body)
                == "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        )
    }

    @Test("FCM messages keep the payload's bytes and add the token, TTL and collapse key")
    func fcmMessage() {
        var item = PushItem(
            sequence: 1, notificationID: "n", registrationID: "r", platform: .fcm, handle: "tok\"en", messageID: "m",
            attempt: 1,
            giveUpAt: 0,
            payload: OutboxPayload(platform: .fcm, body: Array(#"{"data":{"b":"2","a":"1"}}"#.utf8)))
        #expect(
            String(decoding: FCMSender.message(item), as: UTF8.self)
                == #"{"message":{"token":"tok\"en","data":{"b":"2","a":"1"}}}"#)
        item.payload.options.expiresAtUnixMs = 1_060_000
        item.payload.options.collapseID = "score"
        #expect(
            String(decoding: FCMSender.message(item, now: 1_000_000), as: UTF8.self)
                == #"{"message":{"token":"tok\"en","android":{"ttl":"60s","collapse_key":"score"},"data":{"b":"2","a":"1"}}}"#
        )
    }
}
