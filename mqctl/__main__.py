from mqctl.entry import main

main()
