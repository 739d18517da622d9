// Command pause is the node's sandbox ("pause") image: the process that holds a pod's namespaces
// and does nothing else. It sleeps until SIGTERM or SIGINT. The cluster package builds it static
// and pushes it as a one-layer image (see cluster.PauseImage).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("pause: holding the pod's namespaces")
	<-c
}
