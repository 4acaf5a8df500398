package controller

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	demov1 "github.com/actorkube/controllermanager/ctrlruntime/examples/kubebuilder/api/v1"
)

var _ = Describe("Greeting Controller", func() {
	const (
		timeout  = 30 * time.Second
		interval = 10 * time.Millisecond
	)

	Context("When a Greeting is created", func() {
		It("should own Spec.Copies ConfigMaps holding the message and count them", func() {
			greeting := &demov1.Greeting{
				ObjectMeta: metav1.ObjectMeta{Name: "hello-world", Namespace: "default"},
				Spec:       demov1.GreetingSpec{Message: "hello, world", Copies: 2},
			}
			Expect(k8sClient.Create(ctx, greeting)).To(Succeed())

			By("creating the ConfigMaps, each controlled by the Greeting")
			Eventually(func(g Gomega) {
				for _, name := range []string{"hello-world-0", "hello-world-1"} {
					var cm corev1.ConfigMap
					g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, &cm)).To(Succeed())
					g.Expect(cm.Data).To(HaveKeyWithValue("message", "hello, world"))
					owner := metav1.GetControllerOf(&cm)
					g.Expect(owner).NotTo(BeNil())
					g.Expect(owner.Name).To(Equal("hello-world"))
				}
			}, timeout, interval).Should(Succeed())

			By("counting them in the status, through the field index")
			Eventually(func(g Gomega) {
				var got demov1.Greeting
				g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(greeting), &got)).To(Succeed())
				g.Expect(got.Status.ConfigMaps).To(Equal(int32(2)))
			}, timeout, interval).Should(Succeed())

			By("recreating an owned ConfigMap that is deleted")
			key := types.NamespacedName{Namespace: "default", Name: "hello-world-1"}
			var deleted corev1.ConfigMap
			Expect(k8sClient.Get(ctx, key, &deleted)).To(Succeed())
			Expect(k8sClient.Delete(ctx, &deleted)).To(Succeed())
			Eventually(func(g Gomega) {
				var again corev1.ConfigMap
				g.Expect(k8sClient.Get(ctx, key, &again)).To(Succeed())
				g.Expect(again.UID).NotTo(Equal(deleted.UID))
			}, timeout, interval).Should(Succeed())
		})
	})
})
