import Foundation
import HeraldModel
import HeraldRPC
public import HeraldService
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOSSL
public import ServiceLifecycle

/// herald-edge's start-up: Hummingbird on `http-host:http-port`, clients of the four services.
public enum EdgeServer {
    /// What herald-edge runs; `HeraldProcess.main` runs it as a process, tests build it in-process.
    public static let definition = ServiceDefinition(.edge, extraKeys: EdgeConfig.keys) { context in
        let config = try EdgeConfig(reader: context.reader)
        if config.testMode {
            context.logger.warning(
                "test-mode on: /v1/test/inbox and /v1/test/reset answer anyone; never run it in production")
        }
        return [try buildApplication(context: context, config: config)]
    }

    /// The edge application; production and tests build it the same way.
    public static func buildApplication(context: ProcessContext, config: EdgeConfig) throws -> some Service {
        let routes = EdgeRoutes(
            auth: context.client(.auth), registration: context.client(.registration),
            payload: context.client(.payload), dispatch: context.client(.dispatch), config: config,
            verdicts: AuthVerdictCache(authEndpoints: context.config.endpoints(of: ServiceName.auth.rawValue)))
        let router = Router(context: EdgeRequestContext.self)
        routes.add(to: router)
        let urlFile = URL(fileURLWithPath: context.config.runtimeDir).appendingPathComponent("edge.url")
        let logger = context.logger
        let host = config.host
        let headerTimeout = TimeAmount(config.headerTimeout)
        let bodyTimeout = TimeAmount(config.bodyTimeout)
        let drainIdleGrace = TimeAmount(config.drainIdleGrace)
        let http1 = HTTP1Channel.Configuration(
            additionalChannelHandlers: [
                ConnectionGuard(
                    headerTimeout: headerTimeout, bodyTimeout: bodyTimeout, drainIdleGrace: drainIdleGrace,
                    logger: logger)
            ])
        var server = HTTPServerBuilder { responder in EdgeHTTP1Channel(responder: responder, configuration: http1) }
        var scheme = "http"
        if let tls = config.httpTLS {
            let certificates: [NIOSSLCertificate]
            let key: NIOSSLPrivateKey
            do {
                certificates = try NIOSSLCertificate.fromPEMFile(tls.certificate)
                key = try NIOSSLPrivateKey(file: tls.key, format: .pem)
            } catch {
                throw ConfigError("http-tls-cert and http-tls-key must be readable PEM files: \(error)")
            }
            CertificateExpiry.record(certificates, use: "http")
            server = try .tls(
                server,
                tlsConfiguration: .makeServerConfiguration(
                    certificateChain: certificates.map { .certificate($0) }, privateKey: .privateKey(key)))
            scheme = "https"
        }
        return Application(
            router: router,
            server: server,
            configuration: .init(address: .hostname(config.host, port: config.port), serverName: "herald-edge"),
            onServerRunning: { [scheme] channel in
                let port = channel.localAddress?.port ?? config.port
                let url = "\(scheme)://\(host.contains(":") ? "[\(host)]" : host):\(port)"
                do {
                    try Data((url + "\n").utf8).write(to: urlFile, options: .atomic)
                } catch {
                    logger.error("cannot write \(urlFile.path): \(error)")
                }
                logger.info("listening", metadata: ["herald.url": "\(url)"])
            },
            logger: logger
        )
    }
}
