import RegistrationService
import HeraldService

await HeraldProcess.main(RegistrationServer.definition)
