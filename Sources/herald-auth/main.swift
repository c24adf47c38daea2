import AuthService
import HeraldService

await HeraldProcess.main(AuthServer.definition)
