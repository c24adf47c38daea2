import HeraldService
import RegistrationService

await HeraldProcess.main(RegistrationServer.definition)
