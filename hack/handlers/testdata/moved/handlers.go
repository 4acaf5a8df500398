package moved

func (a *renamedActor) handlePing(ping) {}

func onPong() {}
