package v1

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	demov1 "github.com/actorkube/controllermanager/ctrlruntime/examples/kubebuilder/api/v1"
)

var _ = Describe("Greeting Webhook", func() {
	Context("When creating a Greeting through the API server", func() {
		It("should default the message and the copies", func() {
			greeting := &demov1.Greeting{ObjectMeta: metav1.ObjectMeta{Name: "defaulted", Namespace: "default"}}
			Expect(k8sClient.Create(ctx, greeting)).To(Succeed())
			Expect(greeting.Spec.Message).To(Equal("hello"))
			Expect(greeting.Spec.Copies).To(Equal(int32(1)))
		})

		It("should refuse a message that is too long", func() {
			greeting := &demov1.Greeting{
				ObjectMeta: metav1.ObjectMeta{Name: "too-long", Namespace: "default"},
				Spec:       demov1.GreetingSpec{Message: strings.Repeat("x", MaxMessageLength+1)},
			}
			err := k8sClient.Create(ctx, greeting)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring("spec.message"))
		})
	})
})
