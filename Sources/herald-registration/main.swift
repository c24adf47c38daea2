import RegistrationService

await RegistrationServer.main()
